"""serving-hopper.csv's columns, and a sample file of given rows, for the tests of its readers."""
HEADER = ("id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,"
          "moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,"
          "prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,"
          "prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,"
          "decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms")
TAIL = "," * 14  # the 14 pool columns (prefill_*, decode_*) an aggregated row leaves blank


def write_sample(directory, lines, name: str = "serving.csv"):
    """A file of the header and `lines` in `directory`; its path."""
    path = directory / name
    path.write_text("\n".join([HEADER, *lines]) + "\n")
    return path
