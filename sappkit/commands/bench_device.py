"""``sappkit bench-device [--device cpu|cuda] --out my-device.toml``: microbenchmark this machine's device and
write it as a hardware file (the optional extra ``[torch]``)."""

from __future__ import annotations

from ._output import Output, add_output_arguments


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "bench-device",
        description="Time a GEMM sweep (bf16 on a GPU, fp8 where it runs; fp32 on a CPU), the attention kernel "
                    "forward and backward and a large copy with PyTorch, fit the matmul curve (mfu, "
                    "matmul_half_gflop) and write the device as a hardware file that --cluster/--device and "
                    "sappkit.hardware.load read. Each time is the median of --repeats after a warm-up.")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="what to benchmark (default cpu)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per benchmark (default 5)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads on a CPU (default 1: the thread's CPU time is then all the work)")
    parser.add_argument("--out", default=None, metavar="FILE.toml", help="write the device here")
    parser.add_argument("--collectives", type=int, default=None, metavar="N",
                        help="also time the collectives over N local processes (gloo on a CPU, NCCL on GPUs) and "
                             "write a cluster of that node with the device (--out then holds the cluster)")
    add_output_arguments(parser, main="measurements")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    out = Output(args)
    try:
        from ..torch import benchmark_device
    except ImportError:
        out.line("bench-device needs PyTorch, the [torch] extra: pip install 'sappkit[torch]'")
        out.finish()
        return 1
    result = benchmark_device(args.device, repeats=args.repeats, threads=args.threads)
    device = result.device
    out.line(f"{device.name}: fastest GEMM {device.tflops:.4g} TFLOP/s, mfu {device.mfu:.3f}, matmul_half_gflop "
             f"{device.matmul_half_gflop:.3g}, copy {device.hbm_gbs:.4g} GB/s")
    out.table("measurements", result.frame, key=("kind", "m", "n", "k", "dtype", "duration_ms", "tflops", "gbs"))
    written = result
    if args.collectives:
        from ..torch import benchmark_collectives

        written = benchmark_collectives(args.collectives, repeats=args.repeats, device=device)
        link = written.cluster
        out.line(f"{link.name}: {link.intra_node_gbs:.4g} GB/s per rank, {link.latency_us:.4g} us per ring step "
                 f"over {args.collectives} processes")
        out.table("collectives", written.frame, key=tuple(written.frame.columns))
    if args.out:
        out.line(f"wrote {written.write(args.out)}")
    out.finish()
    return 0
