"""Which algorithm cuDNN and oneDNN choose: kernel-name mapping, the main-algorithm rule, the
oneDNN verbose parser, fd capture, the live CPU path, and the GPU path (on a GPU only)."""

import json
import os
import time
import types

import pytest
import torch
from conftest import simulator_only

import helpers  # noqa: F401  (decides the backend first)
from helpers import results
from helpers.conv.config import ConvConfig
from helpers.device import backend
from helpers.experiments import algorithm_choice as ac
from helpers.paper import TABLE_I

needs_gpu = pytest.mark.skipif(backend.MODE != "gpu", reason="needs a real CUDA GPU")

# cuDNN kernel names as shown by nsys/nvprof/torch.profiler, each with where it was seen and the
# family it must map to.
REAL_KERNELS = [
    # apache/mxnet#14684 (nvprof, V100)
    ("void cudnn::detail::implicit_convolve_sgemm<float, float, int=512, int=6, int=8, int=3, "
     "int=3, int=5, int=1, bool=1, bool=0, bool=1>(int, int, int, float const *, int, float*, "
     "cudnn::detail::implicit_convolve_sgemm<float, float, int=512, int=6, int=8, int=3, int=3, "
     "int=5, int=1, bool=1, bool=0, bool=1>*, kernel_conv_params, int, float, float, int, float, "
     "float, int, int)", "implicit-gemm"),
    ("void cudnn::detail::dgrad2d_alg1_1<float, int=0, int=6, int=7, int=5, int=4, int=5, bool=0, "
     "bool=1>(int, int, int, float const *, int, float const , int, ...)", "implicit-gemm"),
    ("volta_scudnn_128x128_stridedB_splitK_xregs_large_nn_v1", "implicit-gemm"),
    ("void cudnn::detail::dgrad_engine<float, int=128, int=6, int=7, int=3, int=3, int=5, bool=1>"
     "(int, int, int, float const *, int, float const , int, ...)", "implicit-gemm"),
    ("void cudnn::detail::wgrad_alg0_engine<float, int=512, int=6, int=5, int=3, int=3, int=3, "
     "bool=0, int=512>(int, int, int, float", "implicit-gemm"),
    ("void fft2d_r2c_32x32<float, bool=1, unsigned int=0, bool=0>(float2*, float const *, int, "
     "int, int, int, int, int, int, int, int, cudnn::reduced_divisor, bool, int2, int, int)",
     "fft"),
    ("volta_gcgemm_64x32_nt", "fft"),
    ("void fft1d_c2r_32<float2, float, float, bool=0, bool=1, bool=0, bool=0>(float*, float2 "
     "const *, int, int3, int3, int2, int, float, float, float*, float*)", "fft"),
    ("volta_cgemm_32x32_tn", "fft"),
    ("void nhwcToNchwKernel<float, float, float, bool=1, bool=0>(int, int, int, int, float const "
     "*, float*, float, float)", "other"),
    ("volta_s884cudnn_fp16_128x128_ldg8_relu_exp_interior_nhwc_tn_v1", "implicit-gemm"),
    ("void scalePackedTensor_kernel<float, float>(cudnnTensor4dStruct, float*, float)", "other"),
    # NVIDIA/apex#666 (nvprof)
    ("void cudnn::detail::explicit_convolve_sgemm<__half, int, int=512, int=6, int=8, int=3, "
     "int=3, int=5, int=0, bool=1>(int, int, int, __half const *, int, __half const , int, ...)",
     "gemm"),
    ("void DSE::vector_fft<int=0, int=1, int=256, int=16, int=16, int=1, __half, float, float2>"
     "(float2*, float2, int, int3, float2*)", "fft"),
    ("void DSE::regular_fft_pad<int=0, int=1, int=128, int=16, int=32, int=1, __half, float, "
     "float2>(float2*, __half*, int, int3, __half*, int, __half*, __half*, int, int, int, int, "
     "int, bool)", "fft"),
    # kblomdahl/dream-go#25 (nvprof)
    ("maxwell_scudnn_winograd_128x128_ldg1_ldg4_relu_tile418n_nt", "winograd"),
    ("void cudnn::detail::cubeTransposeDeviceGeneric_kernel<float, float, float, int=8, int=8, "
     "int=8, int=8, int=8, int=11, int=5>(int, int, int, int, int, int, int, int, int, float, "
     "float const *, float*)", "other"),
    ("void op_tensor_kernel<int=2, float, float, float, int=32, int=1, int=4, int=2, "
     "cudnnOpTensorOp_t=2, cudnnNanPropagation_t=0>(cudnnTensorStruct, float*, ...)", "other"),
    # pytorch/pytorch#34977 (nvprof, channels-last grouped conv)
    ("void conv2d_grouped_direct_kernel<__half, __half, __half, float, float, bool=1, bool=0, "
     "int=1, int=0, int=0>(cudnnTensorStruct, __half const *, cudnnFilterStruct, ...)", "direct"),
    ("void wgrad2d_grouped_direct_kernel<__half, float, float, cudnnTensorFormat_t=1>"
     "(cudnnTensorStruct, __half const *, cudnnTensorStruct, __half const *, ...)", "direct"),
    # pytorch/pytorch#90204 (torch.profiler table, truncated names)
    ("sm75_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwc...", "implicit-gemm"),
    ("void cudnn::ops::nhwcToNchwKernel<__half, __half, fl...", "other"),
    # ryujaehun/pytorch-gpu-benchmark#8 (nvprof)
    ("void flip_filter<__half, __half>(__half*, __half const *, int, int, int, int)", "fft"),
    ("void fft2d_c2r_64x64<__half, bool=0>(__half*, float2*, int, int, int, int, int, int, int, "
     "int, int, int, float, float, int, __half*, __half*)", "fft"),
    ("cudnn::gemm::computeBOffsetsKernel(cudnn::gemm::ComputeBOffsetsParams)", "other"),
    ("void wgrad2d_shmem_tiling_kernel<__half, float, cudnnTensorFormat_t=0, int=4, int=8, "
     "int=40, int=5, int=3, int=3, int=1, int=1, int=1, int=1, int=6, int=3, bool=1>(...)",
     "direct"),
    # PaddlePaddle/benchmark#552 (nvprof)
    ("volta_scudnn_128x64_relu_interior_nn_v1", "implicit-gemm"),
    ("cask_cudnn::computeOffsetsKernel(cask_cudnn::ComputeOffsetsParams)", "other"),
    # TensorFlow profiler traces on GitHub (non-fused Winograd and its tiles)
    ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::"
     "winograd_nonfused::WinogradDataParams<float, float>)", "winograd"),
    ("void cudnn::winograd::generateWinogradTilesKernel<0, float, float>(cudnn::winograd::"
     "GenerateWinogradTilesParams<float, float>)", "winograd"),
    ("volta_sgemm_128x64_nn", "gemm"),  # a plain GEMM: named by the call (main_algorithm)
    # torch.profiler traces on GitHub (Keras/torch models)
    ("void precomputed_convolve_sgemm<float, 512, 6, 7, 4, 3, 5, 1, false>(int, int, int, float "
     "const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, float, "
     "float, int, float const*, float const*, int*)", "implicit-gemm"),
    ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, "
     "(cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)",
     "other"),
    # ResNet-18 torch.profiler write-ups on GitHub (Ampere, TF32) and an H100 trace
    ("cutlass__5x_cudnn::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_64x64_16x10_nhwc_"
     "align4>", "implicit-gemm"),
    ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_"
     "warpsize2x2x1_g1_tensor16x8x8", "implicit-gemm"),
    ("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x128x32",
     "implicit-gemm"),
    ("void cutlass_cudnn::Kernel<cutlass_tensorop_f16_s16816dgrad_optimized_f16_128x256_32x3_"
     "unity_stride>(cutlass_tensorop_f16_s16816dgrad_optimized_f16_128x256_32x3_unity_stride::"
     "Params)", "implicit-gemm"),
    # TensorFlow traces: cuDNN's NHWC engine, with implicit_convolve_sgemm's template arguments
    ("void convolve_common_engine_float_NHWC<__half, __half, 128, 5, 5, 3, 3, 3, true, false, "
     "false, false, false>(int, int, int, __half const*, __half const*, int, __half*, "
     "conv_kernel_common_params, unsigned long long, unsigned long, float, float, bool, ...)",
     "implicit-gemm"),
    ("redzone_checker", "other"),
    # CUTLASS's implicit-GEMM convolution as a mangled name, cut as results/ stores it
    # (results/algorithm_choice_nvidia-h100-80gb-hbm3.csv, backward-filter, H100, 2026-11-27)
    ("_ZN17cutlass__5x_cudnn6KernelINS_4conv6kernel23ImplicitGemmCo...", "implicit-gemm"),
]


@pytest.mark.parametrize("name, family", REAL_KERNELS, ids=lambda v: str(v)[:40])
def test_real_kernel_names_map_to_their_family(name, family):
    assert ac.family_of_kernel(name) == family
    assert ac.family_of_kernel(name.upper()) == family  # case does not matter


def test_the_plausible_wrong_readings_of_kernel_names():
    # "gemm" inside a helper's name is no GEMM; "sgemm" inside implicit_convolve_sgemm is implicit
    assert ac.family_of_kernel("cudnn::gemm::computeBOffsetsKernel(...)") == "other"
    assert ac.family_of_kernel("implicit_convolve_sgemm") == "implicit-gemm"
    # CUTLASS's namespaces (cutlass::gemm::threadblock, mangled 4gemm11threadblock) follow the
    # kernel's own name in a mangled name: the plain-GEMM rule must not win
    assert ac.family_of_kernel("_ZN7cutlass4conv6kernel23ImplicitGemmConvolutionINS_4gemm11"
                               "threadblock12MmaPipelinedE") == "implicit-gemm"
    assert ac.family_of_kernel("explicit_convolve_sgemm") == "gemm"
    # implicit and precomputed-index implicit GEMM are one family
    assert ac.family_of_kernel("precomputed_convolve_sgemm") == "implicit-gemm"
    # fused Winograd carries "scudnn" (the implicit-GEMM kernels' prefix) but is Winograd
    assert ac.family_of_kernel("volta_scudnn_winograd_128x128_ldg1_ldg4_tile148m_nt") == "winograd"
    # layout changes are helpers, whatever they contain
    assert ac.family_of_kernel("void nchwToNhwcKernel<float, float, float, bool=1, bool=0>") \
        == "other"
    # "fft" only as a word: inside another word (a made-up name) it is not an FFT
    assert ac.family_of_kernel("void shiftfft_helper_kernel(float*)") == "other"
    assert ac.family_of_kernel("void regular_fft_pad(float2*)") == "fft"
    assert ac.family_of_kernel("fft_tiled_r2c_32x32") == "fft-tiling"
    assert ac.family_of_kernel("some_unknown_kernel") == "other"
    assert set(f for _, f in REAL_KERNELS) <= set(ac.FAMILIES)
    for bad in ("", "   ", None, 3):
        with pytest.raises(ValueError, match="name"):
            ac.family_of_kernel(bad)


def test_short_kernel_names():
    assert ac.short_kernel_name(REAL_KERNELS[0][0]) == "cudnn::detail::implicit_convolve_sgemm"
    assert ac.short_kernel_name("volta_cgemm_32x32_tn") == "volta_cgemm_32x32_tn"
    # a generic Kernel<...> wrapper keeps the kernel it wraps
    wrapped = dict(REAL_KERNELS)
    name = next(n for n in wrapped if n.startswith("void cutlass_cudnn::Kernel<"))
    assert ac.short_kernel_name(name, 200) == ("cutlass_cudnn::Kernel<cutlass_tensorop_f16_"
                                               "s16816dgrad_optimized_f16_128x256_32x3_unity_"
                                               "stride>")
    cut = ac.short_kernel_name("x" * 100, 20)
    assert cut == "x" * 17 + "..." and len(cut) == 20
    with pytest.raises(ValueError, match="width"):
        ac.short_kernel_name("k", 3)


def _event(name, us, device=torch.autograd.DeviceType.CUDA):
    return types.SimpleNamespace(name=name, device_type=device,
                                 time_range=types.SimpleNamespace(elapsed_us=lambda: us))


def test_kernel_times_sum_cuda_events_per_name_and_divide_by_calls():
    events = [_event("a", 1000.0), _event("b", 300.0), _event("a", 500.0),
              _event("aten::conv2d", 9000.0, torch.autograd.DeviceType.CPU)]
    times = ac.kernel_times(events, repeats=3)
    assert [n for n, _ in times] == ["a", "b"]  # largest first; the CPU op left out
    assert [t for _, t in times] == pytest.approx([0.5, 0.1])
    assert ac.kernel_times([], 1) == []
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="repeats"):
            ac.kernel_times(events, bad)


def test_main_algorithm_is_the_largest_kernel_that_is_not_other():
    layout = "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>(...)"
    implicit = "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw"
    # the largest kernel overall is a layout change: the algorithm is the implicit GEMM
    assert ac.main_algorithm([(layout, 5.0), (implicit, 3.0), ("redzone_checker", 9.0)]) == (
        "implicit-gemm", implicit, 3.0)
    # the largest algorithm kernel wins, not the first
    assert ac.main_algorithm([("flip_filter", 0.2), (implicit, 0.1)])[0] == "fft"
    assert ac.main_algorithm([]) == (None, None, None)
    assert ac.main_algorithm([(layout, 1.0), ("op_tensor_kernel", 2.0)]) == (
        None, "op_tensor_kernel", 2.0)


def test_a_plain_gemm_is_named_by_the_algorithm_around_it():
    data = "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(...)"
    wino = [("volta_sgemm_128x64_nn", 4.0), (data, 1.0)]  # non-fused Winograd: GEMMs dominate
    assert ac.main_algorithm(wino) == ("winograd", "volta_sgemm_128x64_nn", 4.0)
    fft = [("volta_sgemm_64x64_nn", 2.0), ("void fft2d_r2c_32x32<float>(...)", 1.0)]
    assert ac.main_algorithm(fft)[0] == "fft"
    explicit = [("volta_sgemm_128x64_nn", 3.0), ("void im2col4d_kernel<float>(...)", 1.0)]
    assert ac.main_algorithm(explicit)[0] == "gemm"
    assert ac.main_algorithm([("volta_sgemm_128x64_nn", 3.0)])[0] == "gemm"
    # a non-GEMM largest kernel is not renamed by a Winograd helper beside it
    assert ac.main_algorithm([("implicit_convolve_sgemm", 3.0), (data, 1.0)])[0] == "implicit-gemm"


@pytest.mark.parametrize("impl, family", [
    ("jit:avx2", "direct"), ("jit_1x1:avx2", "direct"), ("jit_dw:avx2", "direct"),  # seen here
    ("x64:gemm:jit", "gemm"),                   # seen here: Conv1's backward-data at batch 1
    ("gemm:jit", "gemm"),                       # uxlfoundation/oneDNN#436, #337 (MKL-DNN 0.x)
    ("gemm:blas", "gemm"),                      # uxlfoundation/oneDNN#406
    ("jit:avx512_common", "direct"),            # uxlfoundation/oneDNN#832
    ("ref:any", "direct"),                      # uxlfoundation/oneDNN#1845
    ("brg_conv_fwd:avx512_core", "direct"),     # oneDNN src/cpu/x64 JIT_IMPL_NAME_HELPER
    ("brgconv_bwd_w:avx512_core", "direct"),
    ("brgconv_1x1:avx512_core", "direct"),
    ("jit_wino_4x3:avx512_core", "winograd"),   # a jit_ prefix, but Winograd
    ("indirect_gemm:acl", "gemm"), ("wino:acl", "winograd"),
    ("nhwc_pooling:any", "other"),
])
def test_onednn_implementations_map_to_their_family(impl, family):
    assert ac.family_of_onednn(impl) == family


def test_onednn_family_refuses_a_non_string():
    with pytest.raises(ValueError, match="impl"):
        ac.family_of_onednn(None)


# Lines captured on this project's 2-core AVX2 machine (torch 2.15, oneDNN 3.13.3), Table I layers
# at batch 1, and older formats from uxlfoundation/oneDNN#832 (DNNL 1.6) and #337 (MKL-DNN 0.16).
ONEDNN_TEXT = """\
onednn_verbose,v1,info,oneDNN v3.13.3 (commit b38f97eb6f2173513112f15a0481750b8a66e901)
onednn_verbose,v1,info,cpu,isa:Intel AVX2
onednn_verbose,v1,primitive,info,template:operation,engine,primitive,implementation,prop_kind,\
memory_descriptors,attributes,auxiliary,problem_desc,exec_time
onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef,src:f32::blocked:abcd::f0 \
dst:f32::blocked:Acdb8a::f0,attr-scratchpad:user,,96x3x11x11,0.198975
onednn_verbose,v1,primitive,exec,cpu,convolution,jit:avx2,forward_training,src:f32:a:blocked:\
abcd::f0 wei:f32:a:blocked:Acdb8a::f0 bia:undef::undef::: dst:f32:a:blocked:aBcd8b::f0,\
attr-scratchpad:user,alg:convolution_direct,mb1_ic3oc96_ih128oh118kh11sh1dh0ph0_iw128ow118kw11sw1\
dw0pw0,14.239
onednn_verbose,v1,primitive,exec,cpu,convolution,x64:gemm:jit,backward_data,src:f32:a:blocked:\
abcd::f0 wei:f32:a:blocked:abcd::f0 bia:undef::undef::: dst:f32:a:blocked:abcd::f0,\
attr-scratchpad:user,alg:convolution_direct,mb1_ic3oc96_ih128oh118kh11sh1dh0ph0_iw128ow118kw11sw1\
dw0pw0,36.2451
onednn_verbose,v1,primitive,exec,cpu,convolution,jit:avx2,backward_weights,src:f32:a:blocked:\
aBcd8b::f0 wei:f32:a:blocked:ABcd8b8a::f0 bia:undef::undef::: dst:f32:a:blocked:aBcd8b::f0,\
attr-scratchpad:user,alg:convolution_direct,mb1_ic128oc128_ih16oh10kh7sh1dh0ph0_iw16ow10kw7sw1dh0\
pw0,11.0681
some other program's output line, exec, convolution
dnnl_verbose,exec,cpu,convolution,jit:avx512_common,forward_inference,src_f32::blocked:abcd:f0 \
wei_f32::blocked:Acdb16a:f0 bia_undef::undef::f0 dst_f32::blocked:aBcd16b:f0,,alg:convolution_\
direct,mb1_ic3oc64_ih224oh112kh7sh2dh0ph3_iw224ow112kw7sw2dw0pw3,0.988037
mkldnn_verbose,exec,convolution,gemm:jit,forward_training,fsrc:nchw fwei:oihw fbia:undef \
fdst:nchw,alg:convolution_direct,mb800_g1ic1oc100_ih15oh11kh5sh1dh0ph0_iw200ow1kw200sw1dw0pw0,\
40.5582
"""


def test_parse_onednn_reads_every_format_and_skips_the_rest():
    calls = ac.parse_onednn(ONEDNN_TEXT)
    assert [c["primitive"] for c in calls] == ["reorder"] + ["convolution"] * 5
    assert [c["impl"] for c in calls[1:]] == ["jit:avx2", "x64:gemm:jit", "jit:avx2",
                                               "jit:avx512_common", "gemm:jit"]
    assert [c["pass"] for c in calls[1:]] == ["forward", "backward-data", "backward-filter",
                                               "forward", "forward"]
    assert [c["ms"] for c in calls[1:]] == [14.239, 36.2451, 11.0681, 0.988037, 40.5582]
    assert all(c["alg"] == "convolution_direct" for c in calls[1:]) and calls[0]["alg"] == ""
    assert calls[1]["problem"].startswith("mb1_ic3oc96_ih128oh118kh11")
    assert calls[0]["problem"] == "96x3x11x11" and calls[0]["prop_kind"] == "undef"
    assert ac.parse_onednn("") == [] and ac.parse_onednn("onednn_verbose,v1,info,x") == []


def test_capture_fd_captures_and_restores_even_when_the_body_raises():
    before = os.fstat(1)
    with ac.capture_fd() as cap:
        os.write(1, b"written to fd 1\n")
    assert cap.text == "written to fd 1\n"
    with pytest.raises(RuntimeError, match="boom"):
        with ac.capture_fd() as cap:
            os.write(1, b"before the error\n")
            raise RuntimeError("boom")
    assert cap.text == "before the error\n"
    after = os.fstat(1)
    assert (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
    os.write(1, b"")  # fd 1 is usable
    with pytest.raises(ValueError, match="fd"):
        with ac.capture_fd(987654):
            pass


# ------------------------------------------------------------------ live on this CPU


def test_live_cpu_choice_on_a_table_i_layer():
    row = ac.cpu_choice("Conv4", batch=1, min_run_time=0.02)
    assert list(row) == list(ac.FIELDS) and row["device_kind"] == "cpu"
    assert (row["layer"], row["b"], row["c"], row["k"]) == ("Conv4", 1, 128, 7)
    if ac.torch_backend(TABLE_I[3].with_batch(1)) == "Mkldnn":
        assert row["status"] == "ok" and row["library"].startswith("oneDNN")
        assert row["algorithm"] in ac.FAMILIES[:-1] and row["kernel"]
        assert row["algorithm"] == ac.family_of_onednn(row["kernel"])
        assert row["kernel_ms"] > 0 and "convolution" in row["kernels"]
    else:
        assert "did not call oneDNN" in row["status"] or "no oneDNN" in row["status"]
    assert row["median_ms"] > 0


def test_live_cpu_says_when_torch_did_not_call_onednn():
    # batch 1, a 3 x 3 kernel and 768 input values: torch's heuristic keeps its own slow_conv2d
    small = ConvConfig.from_study(b=1, i=16, f=4, k=3, s=1, c=3)
    assert ac.torch_backend(small) == "Slow2d"
    row = ac.cpu_choice(small, timed=False)
    assert row["library"] == "torch (Slow2d)" and row["algorithm"] == "gemm"
    assert "did not call oneDNN" in row["status"] and row["kernel_ms"] is None
    assert row["median_ms"] is None  # untimed
    with ac.capture_fd() as cap, torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
        torch.nn.functional.conv2d(torch.randn(small.x_shape), torch.randn(small.w_shape))
    assert [c for c in ac.parse_onednn(cap.text) if c["primitive"] == "convolution"] == []
    # the same layer at batch 2 goes to oneDNN
    assert ac.torch_backend(small.with_batch(2)) == "Mkldnn"
    assert ac.cpu_choice(small.with_batch(2), timed=False)["status"] == "ok"


def test_measure_on_the_cpu_with_our_strategies_beside_it():
    rows = ac.measure(["Conv5"], "cpu", batch=1, backward=True, strategies=["im2col-gemm"],
                      min_run_time=0.02)
    assert [r["pass"] for r in rows] == list(ac.PASSES)
    assert all(r["status"] == "ok" or "oneDNN" in r["status"] for r in rows)
    fwd, *back = rows
    assert fwd["ours_im2col-gemm_status"] == "ok" and fwd["ours_im2col-gemm_ms"] > 0
    assert all(r["ours_im2col-gemm_ms"] is None and "not comparable" in
               r["ours_im2col-gemm_status"] for r in back)
    text = ac.summary(fwd)
    assert "picked" in text and "our im2col-gemm took" in text and "Conv5 forward" in text
    assert "Conv5" in ac.format_table(rows)
    with pytest.raises(ValueError, match="strategies"):
        ac.measure(["Conv5"], "cpu", strategies=["magic"])
    with pytest.raises(ValueError, match="device"):
        ac.measure(["Conv5"], "tpu")
    with pytest.raises(ValueError, match="backward"):
        ac.measure(["Conv5"], "cpu", backward="yes")
    with pytest.raises(ValueError, match="pass_"):
        ac.cpu_choice("Conv5", "sideways")


def test_measure_past_its_deadline_runs_nothing():
    rows = ac.measure(["Conv1", "Conv2"], "cpu", strategies=["fft"],
                      deadline=time.monotonic() - 1, time_limit=3.0)
    assert [r["status"] for r in rows] == ["skipped: time limit of 3 s reached"] * 2
    assert all(r["ours_fft_ms"] is None and r["algorithm"] is None for r in rows)


def test_choices_along_a_study_parameter_on_the_cpu():
    base = ConvConfig.from_study(b=2, i=16, f=8, k=3, s=1, c=3)
    rows = ac.choices_along("k", [1, 3, 5], base)
    assert [(r["parameter"], r["x"], r["k"]) for r in rows] == [("k", v, v) for v in (1, 3, 5)]
    assert all(r["b"] == 2 and r["i"] == 16 and r["median_ms"] is None for r in rows)
    assert all(r["algorithm"] in ac.FAMILIES for r in rows)
    both = ac.choices_along("b", [1, 2], base, backward=True)
    assert [(r["x"], r["pass"]) for r in both] == [(b, p) for b in (1, 2) for p in ac.PASSES]
    default = ac.choices_along("s", [1, 2])  # the study's small base (2, 32, 16, 11, s)
    assert [(r["b"], r["i"], r["f"], r["k"], r["s"]) for r in default] == [
        (2, 32, 16, 11, 1), (2, 32, 16, 11, 2)]
    with pytest.raises(ValueError, match="parameter"):
        ac.choices_along("c", [1])
    with pytest.raises(ValueError, match="k"):
        ac.choices_along("k", [40], base)  # kernel larger than the input
    with pytest.raises(ValueError, match="values"):
        ac.choices_along("b", [], base)


# ------------------------------------------------------------------ without a GPU


@simulator_only
def test_gpu_rows_without_a_gpu_say_why():
    row = ac.gpu_choice("Conv1", batch=1)
    assert row["status"].startswith("not measured:") and row["algorithm"] is None
    assert row["device_kind"] == "cuda" and row["kernel_ms"] is None
    rows = ac.measure(["Conv2"], "cuda", strategies=["im2col-gemm"])
    assert rows[0]["ours_im2col-gemm_status"].startswith("not measured:")
    assert ac.summary(rows[0]).endswith(rows[0]["status"])
    with pytest.raises(ValueError, match="repeats"):
        ac.gpu_choice("Conv1", repeats=0)


def test_recorded_reads_labelled_rows_only_from_its_prefix(tmp_path):
    assert not ac.recorded(tmp_path) and ac.COMMAND in ac.recorded(tmp_path).note
    row = {k: None for k in ac.FIELDS}  # a fixture for the reading code, not a measurement
    row.update(layer="Conv1", b=128, algorithm="implicit-gemm", device_kind="cuda", status="ok")
    keys = list(row)
    for name in ("algorithm_choice_test-gpu", "other_prefix"):
        (tmp_path / f"{name}.csv").write_text(",".join(keys) + "\n" + ",".join(
            "" if row[k] is None else str(row[k]) for k in keys) + "\n")
        (tmp_path / f"{name}.json").write_text(json.dumps(
            {"name": name, "date": "2024-01-02T00:00:00+00:00",
             "environment": {"gpu_name": "Test GPU (fixture)"}}))
    rec = ac.recorded(tmp_path)
    assert len(rec.rows) == 1 and rec.rows[0]["source"] == "reference"
    assert rec.rows[0]["device"] == "GPU: Test GPU (fixture), 2024-01-02"
    assert ac.recorded(tmp_path, layer="Conv2").rows == []


def test_command_line_refuses_an_unwritable_out_before_measuring(tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    with pytest.raises(SystemExit) as exc:
        ac.main(["--device", "cpu", "--out", str(a_file)])
    assert exc.value.code == 2 and "not a folder" in capsys.readouterr().err
    for argv in (["--layers", "Conv9"], ["--strategies", "magic"], ["--batch", "0"],
                 ["--time-limit", "0"]):
        with pytest.raises(SystemExit) as exc:
            ac.main(["--device", "cpu", *argv])
        assert exc.value.code == 2


def test_command_line_on_the_cpu(tmp_path, capsys):
    assert ac.main(["--device", "cpu", "--layers", "Conv5", "--batch", "1"]) == 0
    out = capsys.readouterr().out
    assert "Conv5" in out and "forward" in out
    assert ac.main(["--device", "cpu", "--save", "--out", str(tmp_path)]) == results.REFUSED
    assert "nothing was saved" in capsys.readouterr().out and list(tmp_path.iterdir()) == []


@simulator_only
def test_command_line_cuda_without_a_gpu(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    assert ac.main(["--device", "cuda", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "not measured: no CUDA GPU" in out and ac.COMMAND in out
    assert ac.main(["--device", "cuda", "--save", "--out", str(tmp_path)]) == results.REFUSED
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ on a real GPU


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("pass_", ac.PASSES)
def test_gpu_choice_names_an_algorithm_and_restores_benchmark(pass_):
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    try:
        row = ac.gpu_choice("Conv2", pass_, batch=8, repeats=2, min_run_time=0.02)
        assert torch.backends.cudnn.benchmark is False  # restored after the measurement
    finally:
        torch.backends.cudnn.benchmark = before
    assert row["status"].startswith("ok"), row["status"]
    assert row["library"].startswith("cuDNN") and row["algorithm"] in ac.FAMILIES[:-1]
    assert row["kernel_ms"] > 0 and row["median_ms"] > 0 and row["kernel"]
    assert row["device"].startswith("GPU:") and row["tf32"] in (True, False)


@pytest.mark.gpu
@needs_gpu
def test_gpu_measure_puts_our_strategies_beside_cudnn():
    rows = ac.measure(["Conv4"], "cuda", batch=8, strategies=["im2col-gemm"], min_run_time=0.02)
    assert rows[0]["status"].startswith("ok") and rows[0]["ours_im2col-gemm_status"] == "ok"
    assert rows[0]["ours_im2col-gemm_ms"] > 0 and "our im2col-gemm" in ac.summary(rows[0])


@pytest.mark.gpu
@needs_gpu
def test_gpu_command_line_saves_what_recorded_reads(tmp_path):
    assert ac.main(["--layers", "Conv4,Conv5", "--batch", "8", "--save",
                    "--out", str(tmp_path)]) == 0
    rows = ac.recorded(tmp_path).rows
    assert [r["layer"] for r in rows] == ["Conv4", "Conv5"]
    assert all(r["source"] == "reference" and r["algorithm"] for r in rows)
