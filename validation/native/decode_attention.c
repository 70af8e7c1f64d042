/* Decode attention on the CPU: G queries per KV head against S cached keys, reading the cache once.
 *
 * Why it exists: torch 2.13 runs the grouped (G > 1) case as a batched MKL GEMM that streams the
 * cache at 8-25 GB/s on a 2-core EPYC whose plain read stream is ~80 GB/s; only G = 1 takes a fast
 * GEMV path. Here each (sequence, KV head) is one OpenMP task: the scores of its G queries for every
 * key (in a per-thread buffer that stays in L2), a softmax, then the value rows accumulated into G
 * output rows. The scores never reach DRAM, which is what the library's "flash" accounting counts.
 * Common (G, H) pairs get their own copy of the loop with constant bounds, so the compiler keeps the
 * queries and output rows in vector registers. The cache is fp32 or bf16 (widened on load: a bf16
 * is the top half of an fp32); queries, scores and outputs are fp32. Built with
 * -O3 -march=native -ffast-math -fopenmp.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline float load_f32(const float *p) { return *p; }

static inline float load_bf16(const uint16_t *p)
{
    const uint32_t bits = (uint32_t)*p << 16;
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

#define ONE_HEAD(NAME, T, LOAD)                                                                          \
static inline __attribute__((always_inline))                                                            \
void NAME(const float *restrict q, const T *restrict k, const T *restrict v, float *restrict out,       \
          float *restrict scores, const int64_t G, const int64_t S, const int64_t H,                    \
          const int64_t k_key_stride, const int64_t v_key_stride, const float scale)                    \
{                                                                                                        \
    for (int64_t s = 0; s < S; s++) {                                                                    \
        const T *row = k + s * k_key_stride;                                                             \
        for (int64_t g = 0; g < G; g++) {                                                                \
            float dot = 0.0f;                                                                            \
            _Pragma("omp simd reduction(+:dot)")                                                         \
            for (int64_t d = 0; d < H; d++) dot += q[g * H + d] * LOAD(row + d);                         \
            scores[g * S + s] = dot * scale;                                                             \
        }                                                                                                \
    }                                                                                                    \
    for (int64_t g = 0; g < G; g++) {                                                                    \
        float *sg = scores + g * S, top = -INFINITY, total = 0.0f;                                       \
        for (int64_t s = 0; s < S; s++) top = sg[s] > top ? sg[s] : top;                                 \
        _Pragma("omp simd reduction(+:total)")                                                           \
        for (int64_t s = 0; s < S; s++) { sg[s] = expf(sg[s] - top); total += sg[s]; }                   \
        const float inverse = 1.0f / total;                                                              \
        _Pragma("omp simd")                                                                              \
        for (int64_t s = 0; s < S; s++) sg[s] *= inverse;                                                \
    }                                                                                                    \
    float acc[G * H];  /* the G output rows, in registers when G * H is small and constant */           \
    for (int64_t i = 0; i < G * H; i++) acc[i] = 0.0f;                                                   \
    for (int64_t s = 0; s < S; s++) {                                                                    \
        const T *row = v + s * v_key_stride;                                                             \
        for (int64_t g = 0; g < G; g++) {                                                                \
            const float p = scores[g * S + s];                                                           \
            _Pragma("omp simd")                                                                          \
            for (int64_t d = 0; d < H; d++) acc[g * H + d] += p * LOAD(row + d);                         \
        }                                                                                                \
    }                                                                                                    \
    for (int64_t i = 0; i < G * H; i++) out[i] = acc[i];                                                 \
}

#define SPECIALIZED(HEAD, g, h) \
    if (G == g && H == h) { HEAD(qe, ke, ve, oe, scores, g, S, h, k_key_stride, v_key_stride, scale); continue; }

/* q and out: contiguous (B, K, G, H) fp32; k and v: (B, K, S, H) with the given strides, H contiguous. */
#define ENTRY(NAME, T, HEAD)                                                                             \
void NAME(const float *q, const T *k, const T *v, float *out,                                            \
          int64_t B, int64_t K, int64_t G, int64_t S, int64_t H,                                         \
          int64_t k_batch_stride, int64_t k_head_stride, int64_t k_key_stride,                          \
          int64_t v_batch_stride, int64_t v_head_stride, int64_t v_key_stride, float scale)             \
{                                                                                                        \
    _Pragma("omp parallel")                                                                              \
    {                                                                                                    \
        float *scores = malloc(sizeof(float) * G * S);                                                   \
        _Pragma("omp for schedule(static)")                                                              \
        for (int64_t e = 0; e < B * K; e++) {                                                            \
            const int64_t b = e / K, h = e % K;                                                          \
            const float *qe = q + e * G * H;                                                             \
            float *oe = out + e * G * H;                                                                 \
            const T *ke = k + b * k_batch_stride + h * k_head_stride;                                    \
            const T *ve = v + b * v_batch_stride + h * v_head_stride;                                    \
            SPECIALIZED(HEAD, 1, 64) SPECIALIZED(HEAD, 2, 64) SPECIALIZED(HEAD, 4, 64)                   \
            SPECIALIZED(HEAD, 8, 64) SPECIALIZED(HEAD, 16, 64) SPECIALIZED(HEAD, 1, 128)                 \
            SPECIALIZED(HEAD, 2, 128) SPECIALIZED(HEAD, 4, 128) SPECIALIZED(HEAD, 8, 128)                \
            HEAD(qe, ke, ve, oe, scores, G, S, H, k_key_stride, v_key_stride, scale);                    \
        }                                                                                                \
        free(scores);                                                                                    \
    }                                                                                                    \
}

ONE_HEAD(one_head_f32, float, load_f32)
ONE_HEAD(one_head_bf16, uint16_t, load_bf16)
ENTRY(decode_attention_f32, float, one_head_f32)
ENTRY(decode_attention_bf16, uint16_t, one_head_bf16)
