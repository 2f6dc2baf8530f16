"""The manifest is saved as tasks finish, but never for more than SAVE_SHARE of the driver's time: at 10,000 shards
one save of the whole file took ~1 s, so saving after every task grew with the square of the shards."""

import json

from curation.run_folder import SAVE_SHARE, Manifest, RunFolder


def recorded(folder: RunFolder) -> set[str]:
    return set(json.loads(open(folder.path("manifest.json")).read())["stages"]["00_read"]["shards"])


def test_a_record_is_saved_at_once_unless_the_last_save_was_too_recent_and_none_is_lost(tmp_path):
    folder = RunFolder(str(tmp_path / "run"), ["00_read"])
    manifest = Manifest.start(folder, ["hash"])
    manifest.record("00_read", {"shard": 0})
    manifest.saved_at = 0.0
    manifest.save_soon()  # a cheap last save, long ago: saved now
    assert recorded(folder) == {"0"} and not manifest.unsaved

    manifest.save_seconds = 3_600 * SAVE_SHARE  # as if a save took that long: the next waits an hour
    for shard in (1, 2):
        manifest.record("00_read", {"shard": shard})
        manifest.save_soon()
    assert recorded(folder) == {"0"} and manifest.unsaved
    manifest.save_if_unsaved()
    assert recorded(folder) == {"0", "1", "2"} and not manifest.unsaved
    assert Manifest(folder).data == manifest.data
