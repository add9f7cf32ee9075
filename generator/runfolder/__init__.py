"""The run folder: where a run's rows live, on any filesystem pyarrow supports, and the one rule that
decides which of them belong to it.

* ``schemas.layout``: the layout (every path, declared once);
* ``store.RunStore``: bytes in and out, every write atomic;
* ``reader.RunReader``: the committed content (a file belongs to the run exactly when a manifest lists it);
* ``commit``: committing a scene exactly once, error rows, leftovers of killed writers;
* ``keys``: the content keys manifests record (config, source);
* ``lock.RunLock``: one writer at a time, run epochs that fence out workers of a killed driver.
"""
from generator.runfolder.commit import (clean_run, clear_run, commit_scene, commit_tables, remove_leftovers,
                                        rollback_pending, run_files, write_error)
from generator.runfolder.keys import config_key, source_key, text_key
from generator.runfolder.owned import check_owned_folder, release_staging, replace_owned_folder, staging
from generator.runfolder.lock import LockLostError, RunLock, StaleWriterError, current_epoch, make_fence, read_lock
from generator.runfolder.reader import RunReader, read_table
from generator.runfolder.store import RunStore

__all__ = ["RunStore", "RunReader", "read_table", "RunLock", "LockLostError", "StaleWriterError", "current_epoch",
           "make_fence", "read_lock", "commit_scene", "commit_tables", "config_key", "source_key", "text_key", "remove_leftovers",
           "rollback_pending", "write_error", "clean_run", "clear_run", "run_files", "check_owned_folder",
           "replace_owned_folder", "release_staging", "staging"]
