"""Where a training step's GPU time goes, by kind of kernel.

Used by bench_eager.py when POSENC_BENCH_PROFILE names a folder: after the
timed steps of a CUDA case, a few more steps run under torch.profiler, and
the kernels' time is summed by what they do (matrix products, fused
attention, softmax, LayerNorm, dropout, optimizer, gradient clipping,
casts and copies, other element-wise work). The table goes to
FOLDER/profile-<size>-<scheme>-<qkv>.md, with the busiest kernels.

    python3 scripts/step_profile.py --selftest    checks the kernel classes
"""
import os
import sys
import time

# First match wins: the order puts the specific names before the generic ones
# (a fused attention kernel may also say "gemm"; a cast is an element-wise
# kernel; an add of a bf16 tensor to a float32 one names a cast among its
# template arguments, so arithmetic is matched before casts).
CATEGORIES = [
    ("fused attention", ("flash", "fmha", "efficient_attention", "attention", "sdpa")),
    ("optimizer (AdamW)", ("adam",)),
    ("LayerNorm", ("layer_norm", "layernorm")),
    ("gradient clipping", ("norm_kernel", "lpnorm", "foreach_norm", "clip")),
    ("matrix products", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "sm90_", "sm80_", "ampere_", "splitk")),
    ("softmax", ("softmax",)),
    ("dropout", ("dropout", "bernoulli", "philox")),
    ("element-wise arithmetic", ("functor_add", "binaryfunctor", "mulfunctor", "addfunctor", "gelu", "relu")),
    ("casts and copies", ("copy", "cast", "catarray", "to_copy", "memcpy", "memset")),
    ("reductions", ("reduce",)),
    ("other element-wise", ("elementwise", "vectorized", "unrolled", "multi_tensor_apply")),
]


def category(kernel_name):
    name = kernel_name.lower()
    for label, needles in CATEGORIES:
        if any(n in name for n in needles):
            return label
    return "other"


def is_annotation(event):
    """A range that PyTorch marks on the GPU's timeline around the kernels of
    an operation (e.g. "Optimizer.step#AdamW.step"): not a kernel, and
    counting it would count its kernels twice."""
    return getattr(event, "is_user_annotation", False) or "#" in event.name or event.name.startswith("ProfilerStep")


def profile_step(step, sync, steps, out_path, title):
    """Runs `step` (a callable doing one training step) `steps` times under
    torch.profiler and writes the Markdown table to out_path (atomically)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    step()  # one more warm step outside the profile
    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        wall_ms = (time.perf_counter() - t0) * 1000 / steps
    by_category, by_kernel = {}, {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA or is_annotation(e):
            continue
        us = e.time_range.elapsed_us()
        kind = category(e.name)
        by_category[kind] = by_category.get(kind, 0.0) + us
        by_kernel[e.name] = by_kernel.get(e.name, 0.0) + us
    busy_ms = sum(by_category.values()) / 1000 / steps
    lines = [f"# {title}", "",
             f"{steps} profiled steps (torch.profiler, PyTorch {torch.__version__}); the step took {wall_ms:.2f} ms "
             f"under the profiler, of which the GPU was busy {busy_ms:.2f} ms "
             f"({100 * busy_ms / wall_ms:.0f}%; the rest is launch and host time).", ""]
    lines += ["| kernels | ms per step | % of GPU time |", "|---|---:|---:|"]
    total = sum(by_category.values()) or 1.0
    for label, us in sorted(by_category.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {label} | {us / 1000 / steps:.3f} | {100 * us / total:.1f} |")
    lines += ["", "Busiest kernels:", "", "| kernel | class | ms per step |", "|---|---|---:|"]
    for name, us in sorted(by_kernel.items(), key=lambda kv: -kv[1])[:15]:
        short = name if len(name) <= 90 else name[:87] + "..."
        lines.append(f"| `{short.replace('|', '/')}` | {category(name)} | {us / 1000 / steps:.3f} |")
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, out_path)


def selftest():
    cases = {
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>": "fused attention",
        "fmha_cutlassF_bf16_aligned_64x64_rf_sm80": "fused attention",
        "nvjet_tst_128x192_64x4_1x2_h_bz_coopA_NTN": "matrix products",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": "matrix products",
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>": "LayerNorm",
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>": "softmax",
        "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float>": "dropout",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>": "optimizer (AdamW)",
        "void at::native::lpnorm_cleanup<float, NormType::L2>": "gradient clipping",
        "void at::native::unrolled_elementwise_kernel<direct_copy_kernel_cuda>": "casts and copies",
        "void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>": "element-wise arithmetic",
        "void at::native::unrolled_elementwise_kernel<at::native::CUDAFunctor_add<float>, "
        "std::array<char*, 3>, 4, TrivialOffsetCalculator<2>, LoadWithCast<2>, StoreWithCast<1>>":
            "element-wise arithmetic",
        "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda>": "casts and copies",
        "void at::native::elementwise_kernel<128, 4, at::native::FillFunctor<float>>": "other element-wise",
        "void at::native::reduce_kernel<512, 1, ReduceOp<float, SumOps>>": "reductions",
        "Memset (Device)": "casts and copies",
    }
    wrong = {n: (category(n), want) for n, want in cases.items() if category(n) != want}
    Event = type("Event", (), {})
    marked, kernel = Event(), Event()
    marked.name, kernel.name = "Optimizer.step#AdamW.step", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
    if not is_annotation(marked) or is_annotation(kernel):
        wrong["annotation"] = (is_annotation(marked), is_annotation(kernel))
    if wrong:
        sys.exit(f"step_profile.py: misclassified: {wrong}")
    print(f"step_profile.py: {len(cases)} kernel names classified as expected")


if __name__ == "__main__":
    if sys.argv[1:] == ["--selftest"]:
        selftest()
    else:
        sys.exit(__doc__)
