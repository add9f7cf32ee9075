"""The PIE/JAAD benchmark export: the samples of ``generator.attributes.pie`` as one Parquet file per task and
split, which a PIE/JAAD model's data loader can be pointed at, plus ``export_summary.json``::

    OUT/action/{train,val,test,unsplit}.parquet    action prediction samples (crossing in 1-3 s)
    OUT/risk/{train,val,test,unsplit}.parquet      event risk samples (6 classes, 0 = image centre)
    OUT/export_summary.json                        format, source, config, counts, files, per-video errors

Columns: ``schemas.tables.PIE_SAMPLES`` (README, "PIE/JAAD"). Videos outside the split lists
go to ``unsplit``.

The files are written through a run-folder store (``generator.runfolder.RunStore``: atomic, any filesystem),
passed in by the caller since this layer sits below the run folder. A non-empty target that is not an earlier
PIE export is refused; an earlier export's files are replaced and those it listed that this one does not
write are deleted (nothing else is touched). The summary is written last.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from generator.writers.owned import owned_files

EXPORT_FORMAT = "drivegen-pie/1"  # marks a folder as a drivegen PIE export (replaced only if it is one)
EXPORT_SUMMARY = "export_summary.json"
UNSPLIT = "unsplit"


def split_tables(samples: pa.Table) -> dict[str, pa.Table]:
    """``{"<task>/<split>.parquet": rows}`` of the samples, sorted by pedestrian and frame."""
    out: dict[str, pa.Table] = {}
    split = pc.fill_null(samples.column("split"), UNSPLIT)
    for task in sorted(set(samples.column("task").to_pylist())):
        for s in sorted(set(split.to_pylist())):
            m = pc.and_(pc.equal(samples.column("task"), task), pc.equal(split, s))
            t = samples.filter(m)
            if t.num_rows:
                out[f"{task}/{s}.parquet"] = t.sort_by([("video_id", "ascending"), ("ped_id", "ascending"),
                                                        ("end_frame", "ascending")])
    return out


def previous_export(store) -> list[str]:
    """The files an earlier PIE export in ``store`` listed ([] when the folder is new or empty); raises
    ``RunFolderError`` when the folder holds something else (``generator.writers.owned``)."""
    return owned_files(store, "", EXPORT_SUMMARY, EXPORT_FORMAT, what="an earlier PIE export")


def write_pie_export(store, samples: pa.Table, info: dict | None = None) -> dict:
    """Write the export into ``store`` (a ``RunStore``); returns the summary written."""
    old = previous_export(store)
    tables = split_tables(samples)
    files = []
    counts: dict[str, dict[str, int]] = {}
    for rel, t in tables.items():
        store.write_table(rel, t)
        files.append(rel)
        task, split = rel[:-len(".parquet")].split("/")
        counts.setdefault(task, {})[split] = t.num_rows
    summary = {"format": EXPORT_FORMAT, **(info or {}), "samples": counts, "files": files + [EXPORT_SUMMARY]}
    for rel in sorted(set(old) - set(files) - {EXPORT_SUMMARY}):
        if "/" in rel and not rel.startswith(("/", "..")) and ".." not in rel.split("/"):
            store.delete(rel)
    store.write_json(EXPORT_SUMMARY, summary)
    return summary
