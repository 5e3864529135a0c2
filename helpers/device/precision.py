"""TF32, the tensor-core mode NVIDIA GPUs of compute capability 8.0 and newer offer for float32
tensors: the one switch for it (:func:`tf32_mode`) and why it cannot run (:func:`tf32_refusal`).

TF32 keeps float32's 8-bit exponent and rounds the operands of a product to a 10-bit mantissa
(float32 has 23); sums stay float32. torch chooses it with two flags:
``torch.backends.cudnn.allow_tf32`` (cuDNN convolutions, True by default) and
``torch.backends.cuda.matmul.allow_tf32`` (cuBLAS GEMMs, False by default). They change nothing
on a CPU.

Source: NVIDIA A100 Tensor Core GPU Architecture (2020), "TF32"; torch's notes on
"TensorFloat-32 (TF32) on Ampere (and later) devices".
"""

from __future__ import annotations

import contextlib

import torch

from helpers.device import backend

__all__ = ["TF32_CAPABILITY", "tf32_mode", "tf32_refusal"]

#: The compute capability from which a GPU has TF32 tensor cores (Ampere).
TF32_CAPABILITY = (8, 0)


def tf32_mode(enabled: bool):
    """A context manager that sets ``torch.backends.cuda.matmul.allow_tf32`` (cuBLAS GEMMs) and
    ``torch.backends.cudnn.allow_tf32`` (cuDNN convolutions) to ``enabled`` and restores both
    afterwards, also when the block raises.

    Why float32 numbers must say which: torch's defaults differ. cuDNN may use TF32 for float32
    convolutions by default on Ampere and newer GPUs (``cudnn.allow_tf32`` is True), while
    torch's float32 matmul does not (``matmul.allow_tf32`` is False). TF32 keeps float32's range
    but rounds operands to a 10-bit mantissa (float32 has 23). The flags do nothing on the CPU.

    Raises ValueError: ``enabled`` not a bool (before anything is changed).
    """
    if not isinstance(enabled, bool):
        raise ValueError(f"enabled must be True or False, got {enabled!r}")
    return _tf32(enabled)


@contextlib.contextmanager
def _tf32(enabled: bool):
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def tf32_refusal(device: str) -> str | None:
    """Why TF32 cannot run on ``device`` (``"cpu"`` or ``"cuda"``), or None where it can: a GPU
    of compute capability :data:`TF32_CAPABILITY` or newer that torch can use.

    Raises ValueError: an unknown device.
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cpu":
        return ("TF32 is a mode of NVIDIA tensor cores (compute capability 8.0 or newer); "
                "on the CPU torch computes float32 in float32")
    if backend.MODE != "gpu":
        return (f"TF32 is a mode of NVIDIA tensor cores (compute capability 8.0 or newer), "
                f"and there is no GPU here ({backend.MODE_REASON})")
    if not torch.cuda.is_available():
        return "TF32 needs a GPU that torch can use; this torch cannot (a CPU-only build?)"
    cc = tuple(torch.cuda.get_device_capability())
    if cc < TF32_CAPABILITY:
        return (f"TF32 needs compute capability 8.0 (Ampere) or newer; this GPU is "
                f"sm_{cc[0]}{cc[1]}, whose float32 convolutions are float32 already")
    return None
