"""Which torch device a model is built on: one rule for every model backend (mmdet3d detection, SAM 2).

``device`` from the config: anything but ``'auto'`` is used as given. ``'auto'``, in checking order:

1. ``assigned_gpus`` given (a scheduler such as Ray placed this process and says which GPUs it holds):
   * empty: ``'cpu'``, even when torch sees GPUs: they belong to other workers on the node;
   * not empty but torch sees no CUDA device (a node that advertises GPUs by resource only, or a CPU build
     of torch): ``'cpu'``, and ``device_note`` says why;
   * otherwise ``'cuda:0'``: Ray sets ``CUDA_VISIBLE_DEVICES`` to the assigned GPUs, so the first visible
     device is the first one assigned;
2. no scheduler (a plain process): ``'cuda:0'`` when torch sees a GPU, else ``'cpu'``.
"""
from __future__ import annotations


def _cuda_available() -> bool:
    import torch  # torch: seconds to import; only the model backends need it

    return bool(torch.cuda.is_available())


def resolve_device(device: str, assigned_gpus: list | None = None, cuda_available: bool | None = None) -> str:
    """The device string for ``device`` ('auto' or a torch device) under the rules of the module docstring.
    ``cuda_available``: what torch says (asked when None)."""
    if device != "auto":
        return device
    cuda = _cuda_available() if cuda_available is None else cuda_available
    if assigned_gpus is not None and len(assigned_gpus) == 0:
        return "cpu"
    return "cuda:0" if cuda else "cpu"


def device_note(assigned_gpus: list, device: str) -> str | None:
    """A line for the log when the GPUs a scheduler assigned cannot be used; None when all is as asked."""
    if assigned_gpus and device == "cpu":
        return (f"this model actor holds GPU(s) {list(assigned_gpus)} but torch sees no CUDA device "
                f"(a CPU build of torch, or a node advertising GPUs it does not have): the model runs on the CPU")
    return None


def autocast_args(device_type: str, precision: str) -> dict:
    """``torch.autocast`` arguments for a model's ``precision`` setting (``schemas.config.Precision``) on a
    torch device type: 'auto' = bfloat16 on CUDA and float32 elsewhere; 'bf16' / 'fp16' = that type on any
    device (the CPU's autocast runs bfloat16 too, which the precision tests use); 'fp32' = autocast off."""
    import torch  # torch: seconds to import; only the model backends need it

    if precision == "auto":
        precision = "bf16" if device_type == "cuda" else "fp32"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[precision]
    return dict(device_type=device_type, dtype=dtype, enabled=precision != "fp32")
