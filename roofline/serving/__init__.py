"""Serving what-ifs, each priced by `roofline.deployment.Deployment`: speculation, tensor, pipeline and
expert parallelism, the batching simulation, paged KV, crossovers and the throughput factor."""
