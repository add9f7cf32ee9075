"""``sam2`` backend: SAM 2.1 image segmentation with box prompts (STRIDE-QA §4.2 uses SAM 2.1 Large).

``sam2.build_sam.build_sam2(model_config_name, ckpt_path, device)`` builds the model (``checkpoint: null``
= random weights, for tests). The predictor semantics follow ``SAM2ImagePredictor`` (set the image once,
then all box prompts of that image in one decoder call, one mask per box, keeping its predicted IoU),
but the predictor class itself is not used: it imports torchvision for three transforms, and no
torchvision build works with the CPU torch 2.13 this project runs on. The preprocessing is done here
in plain torch instead, with the same arithmetic:

  * ToTensor: HWC uint8 RGB -> CHW float in [0, 1];
  * Resize((S, S)) with S = ``model.image_size`` (1024): ``torch.nn.functional.interpolate`` bilinear with
    ``antialias=True`` (torchvision's tensor Resize default), aspect ratio not kept, as SAM 2 does;
  * Normalize with the ImageNet mean (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225).

Then ``model.forward_image`` -> ``_prepare_backbone_features`` (+ ``no_mem_embed`` for single images) ->
the prompt encoder (box corners as points labelled 2/3, extra positive points labelled 1, padding -1)
-> the mask decoder (``multimask_output=False``), and the 256x256 low-resolution logits are resized to
the image and thresholded at 0. Scores are SAM's predicted IoU clipped to [0, 1]. Images are encoded in
batches of ``segmentation.sam2.batch_images``; GPU when ``device: auto`` finds one. On a GPU the encoder and
decoder run under bfloat16 autocast (``segmentation.sam2.precision``), as SAM 2's own examples run them; the
CPU always runs float32.
"""
from __future__ import annotations

import numpy as np

from actors.segment.base import Segmenter, check_prompts
from schemas.config import SegmentationConfig

_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)


def preprocess(images_bgr: list[np.ndarray], size: int, device):
    """BGR uint8 images -> (B, 3, size, size) float tensor: to [0, 1], resize (antialiased bilinear), normalise."""
    import torch
    import torch.nn.functional as F

    out = []
    for img in images_bgr:
        x = torch.from_numpy(np.ascontiguousarray(img[..., ::-1])).to(device)  # RGB, HWC uint8
        x = x.permute(2, 0, 1).float().div_(255.0)[None]
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
        out.append(x)
    x = torch.cat(out, 0)
    mean = torch.tensor(_MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(_STD, device=device).view(1, 3, 1, 1)
    return (x - mean) / std


class Sam2Segmenter(Segmenter):
    name = "sam2"

    def __init__(self, cfg: SegmentationConfig):
        super().__init__(cfg)
        import torch
        from sam2.build_sam import build_sam2

        from actors.device import resolve_device

        sc = cfg.sam2
        self.device = torch.device(resolve_device(sc.device))
        self.model = build_sam2(sc.model_config_name, ckpt_path=sc.checkpoint, device=str(self.device), mode="eval")
        self.size = int(self.model.image_size)
        self.autocast = dict(device_type=self.device.type, dtype=torch.bfloat16,
                             enabled=self.device.type == "cuda" and sc.precision == "bf16")
        self.feat_sizes = [(self.size // 4,) * 2, (self.size // 8,) * 2, (self.size // 16,) * 2]

    def encode(self, images_bgr: list[np.ndarray]) -> list[dict]:
        """Image features for a batch of images (one backbone pass)."""
        import torch

        with torch.inference_mode(), torch.autocast(**self.autocast):
            x = preprocess(images_bgr, self.size, self.device)
            backbone_out = self.model.forward_image(x)
            _, vision_feats, _, _ = self.model._prepare_backbone_features(backbone_out)
            if self.model.directly_add_no_mem_embed:
                vision_feats[-1] = vision_feats[-1] + self.model.no_mem_embed
            b = x.shape[0]
            feats = [f.permute(1, 2, 0).reshape(b, -1, *hw) for f, hw in zip(vision_feats[::-1], self.feat_sizes[::-1])][::-1]
        return [{"image_embed": feats[-1][i:i + 1], "high_res_feats": [f[i:i + 1] for f in feats[:-1]]} for i in range(b)]

    def decode(self, feats: dict, hw: tuple[int, int], boxes: np.ndarray, pts: list[np.ndarray]):
        """All prompts of one encoded image -> (masks (M, H, W) bool, scores (M,))."""
        import torch
        import torch.nn.functional as F

        H, W = hw
        m = len(boxes)
        if m == 0:
            return np.zeros((0, H, W), dtype=bool), np.zeros(0)
        kmax = max((len(p) for p in pts), default=0)
        coords = np.zeros((m, 2 + kmax, 2), dtype=np.float32)
        labels = np.full((m, 2 + kmax), -1, dtype=np.int32)
        coords[:, :2] = boxes.reshape(m, 2, 2)
        labels[:, 0], labels[:, 1] = 2, 3
        for i, p in enumerate(pts):
            coords[i, 2:2 + len(p)] = p
            labels[i, 2:2 + len(p)] = 1
        coords[..., 0] *= self.size / W
        coords[..., 1] *= self.size / H
        with torch.inference_mode(), torch.autocast(**self.autocast):
            c = torch.from_numpy(coords).to(self.device)
            lab = torch.from_numpy(labels).to(self.device)
            sparse, dense = self.model.sam_prompt_encoder(points=(c, lab), boxes=None, masks=None)
            low_res, iou, _, _ = self.model.sam_mask_decoder(
                image_embeddings=feats["image_embed"], image_pe=self.model.sam_prompt_encoder.get_dense_pe(),
                sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense, multimask_output=False,
                repeat_image=m > 1, high_res_features=feats["high_res_feats"])
            logits = F.interpolate(low_res.float(), size=(H, W), mode="bilinear", align_corners=False)
            masks = (logits[:, 0] > 0.0).cpu().numpy()
            scores = iou[:, 0].float().clamp(0, 1).cpu().numpy().astype(np.float64)
        return masks, scores

    def __call__(self, image, boxes_xyxy, points_uv=None):
        return self.segment_many([(image, boxes_xyxy, points_uv)])[0]

    def segment_many(self, items):
        out = []
        bs = self.cfg.sam2.batch_images
        for i in range(0, len(items), bs):
            chunk = items[i:i + bs]
            checked = [check_prompts(img, b, p) for img, b, p in chunk]
            feats = self.encode([img for img, _, _ in chunk])
            for (img, _, _), (b, p), f in zip(chunk, checked, feats):
                out.append(self.decode(f, img.shape[:2], b, p))
        return out
