"""DRAMA-X (seed 003): VRU intent, risk and suggested ego action. On 3D logs the attributes stage derives
``drama_risk`` (``attributes.risk_table``); on camera-only videos the video stage derives ``drama_video``
(image intent from optical flow, ``attributes.video_image_intent`` and ``video_risk``). QA family
``drama_x`` (``qa``, templates in ``templates/``), the A.2 export (``drivegen export drama_x``, ``export``) and
the scorer (``drivegen score drama-x``, ``score``).
"""
from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc

from schemas.families import PaperFamily

HERE = Path(__file__).parent


class DramaX(PaperFamily):
    name = "drama_x"
    title = "DRAMA-X"
    order = 30
    config_section = "drama_x"
    qa_names = ("drama_x",)

    def config_model(self):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.drama_x.config import DramaXConfig

        return DramaXConfig

    def tables(self):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.drama_x.tables import DRAMA_RISK, DRAMA_VIDEO
        from schemas.layout import TableLayout

        return [TableLayout("drama_risk", "drama_risk", DRAMA_RISK), TableLayout("drama_video", "drama_video", DRAMA_VIDEO)]

    def derive(self, scene, cfg):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.drama_x.attributes import risk_table

        return {"drama_risk": risk_table(scene["frames"], scene["objects"], cfg.drama_x, cfg.ego)}

    def derive_video(self, video, cfg):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.drama_x.attributes import video_intent

        table = video_intent(video, cfg)
        return {} if table is None else {"drama_video": table}

    def counts(self, tables, cfg):
        t = tables.get("drama_video")
        return {} if t is None else {"image_intent": t.num_rows}

    def qa_families(self):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.drama_x.qa import DRAMA_X

        return [DRAMA_X]

    def template_dirs(self):
        return [HERE / "templates"]

    def video_qa(self, tables, cfg):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.drama_x.qa import video_batches

        t = tables.get("drama_video")
        return video_batches(t) if t is not None and t.num_rows else []

    def summary_entry(self, data):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.drama_x.qa import DramaSummary

        return DramaSummary(**data)

    def summary(self, counts, exports, camera_only):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.drama_x.qa import DramaSummary

        return DramaSummary(counts.get("image_intent", 0)) if camera_only else None

    def report_video_cells(self, reader, video_id, counts):
        d = reader.read_scene("drama_video", video_id, columns=["risk"])
        n, at_risk = (0, 0) if d is None else (d.num_rows, int(pc.sum(d.column("risk")).as_py() or 0))
        return {"DRAMA-X rows (at risk)": f"{n} ({at_risk})"}

    def scorer(self):
        return "generator.families.drama_x.score"

    def score_arguments(self, parser):
        parser.add_argument("--bertscore-model", default=None,
                            help="drama-x: a local BERT-style model folder for the paper's action metric (BERTScore F1 "
                                 "through bert-score, extra 'bertscore'); without it the action score is "
                                 "exact-vocabulary accuracy and token F1")
        parser.add_argument("--bertscore-layers", type=int, default=None,
                            help="drama-x: the model layer BERTScore reads (default: bert-score's choice for the model)")
        parser.add_argument("--protocol", choices=("paper", "public"), default=None,
                            help="drama-x: 'paper' (default): the paper's metrics (App. A.3-A.4); 'public': DRAMA-X's "
                                 "public evaluation scripts case for case (the first len(predictions) samples, one "
                                 "box may detect several objects; docs/families/drama-x.md lists every difference)")
        parser.add_argument("--od-iou", type=float, default=None,
                            help="drama-x: the IoU a detection needs (default: 0.5 paper, 0.25 public)")
        parser.add_argument("--match-iou", type=float, default=None,
                            help="drama-x: the IoU an intent's box match needs (default: 0.3 paper, 0.6 public)")

    def score_options(self, args):
        # lazy: the registry imports every family's package for its declarations alone
        from schemas.errors import InputError

        out = {k: getattr(args, k, None) for k in ("protocol", "od_iou", "match_iou")}
        out = {k: v for k, v in out.items() if v is not None}
        model, layers = getattr(args, "bertscore_model", None), getattr(args, "bertscore_layers", None)
        if model is None and layers is None:
            return out
        if not model:
            raise InputError("--bertscore-layers needs --bertscore-model")
        return {**out, "bertscore_model": model, "bertscore_num_layers": layers}

    def export_command(self):
        return "generator.families.drama_x.export_drama"


FAMILY = DramaX()
