"""The subfolder hint of a missing release file (walk21 #11), as its review (rev22) found it: a subfolder that cannot
be searched (a mount root's root-owned lost+found) replaced the release message with a PermissionError; a folder that
is the release (it holds sites.csv) but lacks one file was offered a subfolder holding only a copy of sites.csv."""
import errno
import os
import pathlib
import shutil
from pathlib import Path


from geoagent import paths
from geoagent.cli import main

CONFIGS = Path(__file__).resolve().parents[1] / "geoagent" / "configs"


def test_a_subfolder_that_cannot_be_searched_keeps_the_release_message(tmp_path, monkeypatch):
    """A folder with a subfolder this user may list but not enter (a mount's lost+found, another user's private
    folder): the first version of the hint let stat() of <sub>/sites.csv raise EACCES out of missing_release_error
    (as a non-root user: PermissionError: [Errno 13] Permission denied: '.../locked/sites.csv'), which replaced the
    'release file not found' message. Simulated here (the suite may run as root, whom permissions do not stop)."""
    (tmp_path / "lost+found").mkdir()
    real_stat = pathlib.Path.stat

    def stat(self, *a, **kw):
        if self.parent.name == "lost+found":
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_stat(self, *a, **kw)

    monkeypatch.setattr(pathlib.Path, "stat", stat)
    e = paths.missing_release_error(tmp_path, [tmp_path / "sites.csv", tmp_path / "data" / "sites.csv"])
    assert isinstance(e, FileNotFoundError) and "holds no sites.csv" in str(e)


def test_no_subfolder_offered_when_the_folder_is_the_release(release_dir, tmp_path, monkeypatch, capsys):
    """The folder in use is the release (sites.csv, ladders/: the import works); only the replay file is missing. A
    subfolder holding a copy of sites.csv, but not the replay file, is offered as 'the release folder'."""
    rel = tmp_path / "geocontext"
    shutil.copytree(release_dir, rel)
    os.chmod(rel, 0o755)
    (rel / "verify_raw_sample.jsonl").chmod(0o644)
    (rel / "verify_raw_sample.jsonl").unlink()
    (rel / "2024-copy").mkdir()
    shutil.copy(rel / "sites.csv", rel / "2024-copy" / "sites.csv")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEOAGENT_RELEASE", str(rel))
    assert main(["run", str(CONFIGS / "geocontext_replay.toml"), "--simulate", "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "holds no verify_raw_sample.jsonl" in err, err
    assert "2024-copy" not in err, err  # was: "its subfolder .../2024-copy holds sites.csv: is that the release folder?"
