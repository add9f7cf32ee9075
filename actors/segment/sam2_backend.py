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
batches of ``segmentation.sam2.batch_images``, and the box prompts of a batch's images share mask-decoder
calls of up to ``segmentation.sam2.decode_prompts`` prompts (0: one call per image, as the predictor
does; ``auto``, the default: 32 on a GPU, one call per image on the CPU, each the faster where measured).
GPU when ``device: auto`` finds one. On a GPU the encoder and decoder run under bfloat16 autocast
(``segmentation.sam2.precision: auto``), as SAM 2's own examples run them; the CPU runs float32 unless the
setting names a reduced type.
"""
from __future__ import annotations

import numpy as np

from actors.device import autocast_args, resolve_device
from actors.segment.base import Segmenter, check_prompts
from schemas.config import SegmentationConfig

_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)


def preprocess(images_bgr: list[np.ndarray], size: int, device):
    """BGR uint8 images -> (B, 3, size, size) float tensor: to [0, 1], resize (antialiased bilinear), normalise."""
    import torch  # torch: seconds to import; only the model backends need it
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
        import torch  # torch: seconds to import; only the model backends need it
        from sam2.build_sam import build_sam2  # sam2: optional model stack (extra 'sam2'), only for its backend

        sc = cfg.sam2
        self.device = torch.device(resolve_device(sc.device))
        self.model = build_sam2(sc.model_config_name, ckpt_path=sc.checkpoint, device=str(self.device), mode="eval")
        self.size = int(self.model.image_size)
        self.autocast = autocast_args(self.device.type, sc.precision)
        self.feat_sizes = [(self.size // 4,) * 2, (self.size // 8,) * 2, (self.size // 16,) * 2]
        self.decode_prompts = sc.decode_prompts_on(self.device.type)  # prompts per decoder call, 0 = per image

    def encode(self, images_bgr: list[np.ndarray]) -> list[dict]:
        """Image features for a batch of images (one backbone pass)."""
        import torch  # torch: seconds to import; only the model backends need it

        with torch.inference_mode(), torch.autocast(**self.autocast):
            x = preprocess(images_bgr, self.size, self.device)
            backbone_out = self.model.forward_image(x)
            _, vision_feats, _, _ = self.model._prepare_backbone_features(backbone_out)
            if self.model.directly_add_no_mem_embed:
                vision_feats[-1] = vision_feats[-1] + self.model.no_mem_embed
            b = x.shape[0]
            feats = [f.permute(1, 2, 0).reshape(b, -1, *hw) for f, hw in zip(vision_feats[::-1], self.feat_sizes[::-1])][::-1]
        return [{"image_embed": feats[-1][i:i + 1], "high_res_feats": [f[i:i + 1] for f in feats[:-1]]} for i in range(b)]

    def _prompt_tokens(self, boxes: np.ndarray, pts: list[np.ndarray], hw: tuple[int, int], kmax: int):
        """One image's prompts as SAM's point tokens in model pixels: the box corners (labels 2, 3), then the
        extra positive points (1), padded to ``kmax`` points with label -1. -> coords (M, 2 + kmax, 2), labels."""
        H, W = hw
        m = len(boxes)
        coords = np.zeros((m, 2 + kmax, 2), dtype=np.float32)
        labels = np.full((m, 2 + kmax), -1, dtype=np.int32)
        coords[:, :2] = boxes.reshape(m, 2, 2)
        labels[:, 0], labels[:, 1] = 2, 3
        for i, p in enumerate(pts):
            coords[i, 2:2 + len(p)] = p
            labels[i, 2:2 + len(p)] = 1
        coords[..., 0] *= self.size / W
        coords[..., 1] *= self.size / H
        return coords, labels

    def decode(self, feats: dict, hw: tuple[int, int], boxes: np.ndarray, pts: list[np.ndarray]):
        """All prompts of one encoded image -> (masks (M, H, W) bool, scores (M,))."""
        return self.decode_many([feats], [hw], [(boxes, pts)], max_prompts=None)[0]

    def decode_many(self, feats: list[dict], hws: list[tuple[int, int]], prompts: list[tuple[np.ndarray, list]],
                    max_prompts: int | None) -> list[tuple[np.ndarray, np.ndarray]]:
        """The prompts of several encoded images in few mask-decoder calls: images whose prompts pad to the same
        number of points (padding tokens are part of SAM's input, so only those may share a call) go together,
        at most ``max_prompts`` prompts a call (None: no limit), each prompt with its own image's features
        gathered to it, which is what ``repeat_image`` does within one image; masks are resized to each image's
        own size. -> [(masks (M, H, W) bool, scores (M,))] per image."""
        import torch  # torch: seconds to import; only the model backends need it
        import torch.nn.functional as F

        parts: list[list] = [[] for _ in feats]  # per image: (masks, scores) pieces in prompt order
        groups: dict[int, list[int]] = {}
        for i, (boxes, pts) in enumerate(prompts):
            if len(boxes):
                groups.setdefault(max((len(p) for p in pts), default=0), []).append(i)
        dense_pe = None
        for kmax, members in groups.items():
            tokens = [self._prompt_tokens(*prompts[i], hws[i], kmax) for i in members]
            coords = np.concatenate([c for c, _ in tokens])
            labels = np.concatenate([lab for _, lab in tokens])
            owner = np.concatenate([np.full(len(c), k) for k, (c, _) in enumerate(tokens)])
            step = max_prompts or len(owner)
            with torch.inference_mode(), torch.autocast(**self.autocast):
                if dense_pe is None:
                    dense_pe = self.model.sam_prompt_encoder.get_dense_pe()
                if len(members) == 1:  # no copy for one image (the per-image path)
                    embed, high = feats[members[0]]["image_embed"], feats[members[0]]["high_res_feats"]
                else:
                    embed = torch.cat([feats[i]["image_embed"] for i in members])
                    high = [torch.cat([feats[i]["high_res_feats"][lvl] for i in members]) for lvl in range(2)]
                for a in range(0, len(owner), step):
                    sel = owner[a:a + step]
                    one = len(members) == 1 or (sel == sel[0]).all()
                    c = torch.from_numpy(coords[a:a + step]).to(self.device)
                    lab = torch.from_numpy(labels[a:a + step]).to(self.device)
                    sparse, dense = self.model.sam_prompt_encoder(points=(c, lab), boxes=None, masks=None)
                    if one:  # one image: SAM repeats its features itself
                        img = embed[int(sel[0]):int(sel[0]) + 1]
                        hr = [h[int(sel[0]):int(sel[0]) + 1] for h in high]
                    else:
                        idx = torch.from_numpy(sel).to(self.device)
                        img, hr = embed.index_select(0, idx), [h.index_select(0, idx) for h in high]
                    low_res, iou, _, _ = self.model.sam_mask_decoder(
                        image_embeddings=img, image_pe=dense_pe, sparse_prompt_embeddings=sparse,
                        dense_prompt_embeddings=dense, multimask_output=False, repeat_image=one and len(sel) > 1,
                        high_res_features=hr)
                    scores = iou[:, 0].float().clamp(0, 1).cpu().numpy().astype(np.float64)
                    for k in np.unique(sel):  # masks at each image's own size
                        rows = np.flatnonzero(sel == k)
                        i = members[int(k)]
                        logits = F.interpolate(low_res[torch.from_numpy(rows).to(self.device)].float(),
                                               size=hws[i], mode="bilinear", align_corners=False)
                        parts[i].append(((logits[:, 0] > 0.0).cpu().numpy(), scores[rows]))
        out = []
        for i, (H, W) in enumerate(hws):
            if not parts[i]:
                out.append((np.zeros((0, H, W), dtype=bool), np.zeros(0)))
            else:
                out.append((np.concatenate([m for m, _ in parts[i]]), np.concatenate([sc for _, sc in parts[i]])))
        return out

    def __call__(self, image, boxes_xyxy, points_uv=None):
        return self.segment_many([(image, boxes_xyxy, points_uv)])[0]

    def segment_many(self, items):
        """Each image's masks; the images with prompts are encoded in batches of ``sam2.batch_images``. An image
        without prompts gets none and is never encoded: perception passes every camera image it read, and a
        camera that sees no object passing the geometric filters would cost a backbone pass (the model's cost)
        for nothing."""
        checked = [check_prompts(img, b, p) for img, b, p in items]
        out: list = [(np.zeros((0, *img.shape[:2]), dtype=bool), np.zeros(0)) for img, _, _ in items]
        todo = [i for i, (b, _) in enumerate(checked) if len(b)]
        bs = self.cfg.sam2.batch_images
        for k in range(0, len(todo), bs):
            chunk = todo[k:k + bs]
            feats = self.encode([items[i][0] for i in chunk])
            hws = [items[i][0].shape[:2] for i in chunk]
            prompts = [checked[i] for i in chunk]
            if self.decode_prompts:  # the batch's images together
                done = self.decode_many(feats, hws, prompts, self.decode_prompts)
            else:  # one decoder call per image
                done = [self.decode(f, hw, b, p) for f, hw, (b, p) in zip(feats, hws, prompts)]
            for i, res in zip(chunk, done):
                out[i] = res
        return out
