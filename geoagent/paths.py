"""Resolution of data roots and safe file names (imports only constants).

:func:`missing_release_error` is the one message for a GeoContext release file that is not where it was
looked for (release importer, sandbox gazetteer, a replay file under the release folder): which file, whether
its folder exists, how to point at the release (``$GEOAGENT_RELEASE`` or ``[paths] release_dir``) and where the
public release is (:data:`RELEASE_URL`). When the folder is a campaign's state folder (a crawl's output, used as
``release_dir`` of an evaluation campaign: :func:`is_state_folder`) it says so instead: the crawl has not
written it yet (``crawl output not found: ...``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

from geoagent import constants as C

#: matched with ``fullmatch``: ``$`` in ``match`` also matches before a final newline ("123\n" would pass)
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_DIGITS = re.compile(r"[0-9]{1,32}")


def home_expanded(value: str | os.PathLike[str], what: str) -> Path:
    """``value`` as a path with a leading ``~`` or ``~user`` expanded (``Path.expanduser``).

    Raises
    ------
    ValueError
        ``~user`` names no user of this machine (``Path.expanduser`` raises RuntimeError: a traceback before,
        config38 #6); the message names ``what`` (the key or variable that gave the path)."""
    try:
        return Path(value).expanduser()
    except RuntimeError:
        head = str(value).split("/", 1)[0]
        raise ValueError(f"{what} = {str(value)!r}: {head} names no home folder on this machine (no such user); write "
                         "the path in full") from None


def queues_root(configured: str | os.PathLike[str] | None = None) -> Path:
    """Root folder of the durable queues: config value, else ``$GEOAGENT_QUEUES``, else ``queues/`` (``~`` expanded)."""
    return home_expanded(configured or os.environ.get(C.ENV_QUEUES_ROOT) or C.DEFAULT_QUEUES_ROOT,
                         "the queues root" if configured else f"${C.ENV_QUEUES_ROOT}")


def state_root(configured: str | os.PathLike[str] | None = None) -> Path:
    """Root folder of campaign state: config value, else ``$GEOAGENT_STATE``, else ``state/`` (``~`` expanded)."""
    return home_expanded(configured or os.environ.get(C.ENV_STATE_ROOT) or C.DEFAULT_STATE_ROOT,
                         "the state root" if configured else f"${C.ENV_STATE_ROOT}")


#: the campaign name of `run.py demo`'s crawl (geoagent/configs/demo_crawl.toml): its state folder is the
#: ``release_dir`` of the fresh-clone GeoVerify example (docs/campaigns.md, "Your own campaign, offline, in a minute")
DEMO_CRAWL = "demo-crawl"

#: the public GeoContext release (code and data; the paper's reproducibility statement)
RELEASE_URL = "https://github.com/Yifan1209/geocontext"


def is_state_folder(folder: str | os.PathLike[str], root_dir: str | os.PathLike[str] | None = None) -> bool:
    """Whether ``folder`` is (or would be) a campaign's state folder, such as a crawl's output: it holds the
    campaign's ``manifest.json`` or ``campaign.sqlite``, or it lies directly in the state root (``root_dir``,
    default :func:`state_root`: ``$GEOAGENT_STATE``, else ``state/``), compared after resolving both."""
    f = Path(folder)
    if (f / C.MANIFEST_FILE).is_file() or (f / C.CAMPAIGN_DB).is_file():
        return True
    root = Path(root_dir) if root_dir is not None else state_root()
    try:
        return f.resolve().parent == root.resolve()
    except OSError:
        return False


def missing_crawl_output_error(
    folder: str | os.PathLike[str],
    looked_for: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
) -> FileNotFoundError:
    """The error for a crawl's state folder, used as an evaluation's ``release_dir``, that lacks a file.

    Returns
    -------
    FileNotFoundError
        One line: ``crawl output not found: <file> (the folder <dir> does not exist | holds no <name>); run
        `python run.py crawl CRAWL_CONFIG` first ...`` (``<file>``: the first of ``looked_for``); for the demo's
        crawl folder (:data:`DEMO_CRAWL`) ``run `python run.py demo` first ...``.
    """
    root = Path(folder)
    # a crawl writes its tables at the top of its folder (never a release checkout's data/)
    file = Path(looked_for) if isinstance(looked_for, (str, os.PathLike)) else Path(looked_for[0])
    shown = str(root) if root.is_absolute() else f"{root} (= {os.path.abspath(root)})"
    state = f"the folder {shown} does not exist" if not root.exists() else f"the folder {shown} holds no {_rel(file, root)}"
    if root.name == DEMO_CRAWL:  # docs/campaigns.md's fresh-clone campaign reads the demo's crawl: the demo writes it
        first = (f"run `python run.py demo` first (its crawl campaign, {DEMO_CRAWL!r}, writes sites.csv, ladders/ "
                 "and verify_trials.csv into this folder, with the same state root)")
    else:
        first = (f"run `python run.py crawl CRAWL_CONFIG` first (the crawl campaign named {root.name!r} writes "
                 "sites.csv, ladders/ and, when it completes, verify_trials.csv into this folder; see "
                 "geoagent/configs/crawl_sandbox.toml)")
    if not root.is_absolute() and not root.exists():
        # run from another folder than the campaign's: the likeliest cause, and "run the demo" would make a second
        # tree here (walkthrough 20)
        first = (f"a relative release_dir is taken from the folder the command runs in ({Path.cwd()}), not from the "
                 "config file's folder: run the command from the folder the crawl (or the demo) ran in, or write "
                 f"that folder's absolute path; if it has not run yet, {first}")
    return FileNotFoundError(
        f"crawl output not found: {file} ({state}); {first}, or point release_dir at a finished crawl's state "
        f"folder or at the GeoContext release ({RELEASE_URL})"
    )


def missing_release_error(
    release_dir: str | os.PathLike[str],
    looked_for: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    role: str | None = None,
    state_root_dir: str | os.PathLike[str] | None = None,
) -> FileNotFoundError:
    """The error for a GeoContext release file that is not there (raise what this returns).

    Parameters
    ----------
    release_dir : path
        The release folder in use (``CampaignConfig.release_dir()``: ``$GEOAGENT_RELEASE``, else
        ``[paths] release_dir``, else ``../shared/reference/geocontext`` relative to the working directory).
    looked_for : path or sequence of paths
        The file(s) looked for, in the order tried (e.g. ``sites.csv``, then ``data/sites.csv``).
    role : str, optional
        What the file was wanted for (e.g. ``"replay file of [[models]] entry 'release-replay' (model 'recorded')"``).

    Returns
    -------
    FileNotFoundError
        One line: ``GeoContext release file not found: <file> (<role>; the folder <dir> does not exist |
        holds no <name>); point at the release folder with GEOAGENT_RELEASE=... or [paths] release_dir ...
        (the public release: https://github.com/Yifan1209/geocontext ...)``. A relative folder is also shown
        resolved against the working directory. Without ``role`` (a campaign's release folder) it ends with
        :data:`DEMO_CRAWL_HINT` (the demo's crawl instead, docs/campaigns.md's fresh-clone variant).
        For a campaign state folder (:func:`is_state_folder` under
        ``state_root_dir``, default the state root) and no ``role``: :func:`missing_crawl_output_error` instead.
    """
    root = Path(release_dir)
    if role is None and is_state_folder(root, state_root_dir):
        return missing_crawl_output_error(root, looked_for)
    files = [Path(looked_for)] if isinstance(looked_for, (str, os.PathLike)) else [Path(p) for p in looked_for]
    shown = str(root) if root.is_absolute() else f"{root} (= {os.path.abspath(root)})"
    if not root.exists():
        state = f"the folder {shown} does not exist"
    elif not root.is_dir():
        state = f"{shown} is not a folder"
    else:
        state = f"the folder {shown} holds no {' nor '.join(str(_rel(f, root)) for f in files)}"
        holds_release = any(os.path.isfile(root / n) for n in ("sites.csv", os.path.join("data", "sites.csv")))
        inner = _release_below(root, [_rel(f, root) for f in files], any_release=not holds_release)
        if inner is not None:  # e.g. GEOAGENT_RELEASE set to the folder the release was cloned into
            state += f"; its subfolder {inner[0]} holds {inner[1]}: is that the release folder?"
    what = f"{role}; " if role else ""
    return FileNotFoundError(
        f"GeoContext release file not found: {' nor '.join(str(f) for f in files)} ({what}{state}); point at "
        f"the release folder with {C.ENV_RELEASE_DIR}=/path/to/geocontext or [paths] release_dir in the campaign "
        f"file (it holds sites.csv, ladders/ and verify_raw*.jsonl). The public release is {RELEASE_URL}: "
        f"clone or download it and point at that folder (or its data/ folder), e.g. {C.ENV_RELEASE_DIR}=$HOME/geocontext"
        + ("" if role else DEMO_CRAWL_HINT)
    )


def _release_below(root: Path, names: Sequence[str | os.PathLike[str]], *,
                   any_release: bool) -> tuple[Path, Path] | None:
    """The first subfolder of ``root`` (name order, one level down, hidden ones skipped; a subfolder that cannot be
    read is skipped) that holds one of the relative file ``names`` the release folder was looked in for, with that
    file (relative), else None (also when ``root`` cannot be listed). With ``any_release`` (``root`` holds no
    release table at all), a subfolder holding the release's ``sites.csv`` (also under ``data/``) counts too. Names
    that are not relative to ``root`` (absolute paths elsewhere) are not looked for."""
    rel = list(dict.fromkeys(Path(n) for n in names if not Path(n).is_absolute()))
    if any_release:
        rel += [n for n in (Path("sites.csv"), Path("data", "sites.csv")) if n not in rel]
    try:
        with os.scandir(root) as it:
            subs = sorted(e.path for e in it if not e.name.startswith(".") and e.is_dir())
    except OSError:
        return None
    for sub in subs:
        for n in rel:
            if os.path.isfile(os.path.join(sub, n)):  # False, never an error, for a folder it cannot search
                return Path(sub), n
    return None


#: the end of :func:`missing_release_error` for a campaign's release folder (no ``role``): docs/campaigns.md's
#: alternative on a fresh clone, a campaign over the demo's crawl (its release-form folder ``state/demo-crawl``)
DEMO_CRAWL_HINT = ('. Without the release: run `python run.py demo` first, then set, under [geoverify] (or [geohint]), '
                   f'release_dir = "state/{DEMO_CRAWL}" (the demo crawl\'s folder, relative to where you run; a task '
                   'section\'s release_dir wins over $GEOAGENT_RELEASE, [paths] release_dir loses to it) and '
                   'image_root = "state/images" (its photos; [geohint] also images = "release"); docs/campaigns.md: '
                   'the fresh-clone variant of my_verify.toml')


def release_argument_error(release_dir: str | os.PathLike[str], filename: str | None = None) -> FileNotFoundError | None:
    """The error of a command that takes the release folder as its ``RELEASE_DIR`` argument
    (``python -m geoagent.geohint.judged``, ``python -m geoagent.geohint.raw_import``), or None when usable.

    Unlike :func:`missing_release_error` (campaigns: ``$GEOAGENT_RELEASE`` or ``[paths] release_dir``), it names
    the argument, which is all such a command reads: ``RELEASE_DIR <dir>: not a GeoContext release folder (...)``
    when neither ``sites.csv`` nor ``data/sites.csv`` is there; ``--file <name>: no such file: <path>`` when
    ``filename`` (the command's ``--file``) is not in the release's data folder. Returns the error (raise it)."""
    root = Path(release_dir)
    shown = str(root) if root.is_absolute() else f"{root} (= {os.path.abspath(root)})"
    data = next((d for d in (root, root / "data") if (d / "sites.csv").is_file()), None)
    if data is None:
        state = ("the folder does not exist" if not root.exists() else "it is not a folder" if not root.is_dir()
                 else "it holds no sites.csv nor data/sites.csv")
        return FileNotFoundError(
            f"RELEASE_DIR {shown}: not a GeoContext release folder ({state}); give the release folder (it holds "
            f"sites.csv and ladders/, or data/ with them) as the first argument"
            + (f" (this command reads only that argument, not ${C.ENV_RELEASE_DIR} = {os.environ[C.ENV_RELEASE_DIR]!r})"
               if os.environ.get(C.ENV_RELEASE_DIR) else "")
            + f". The public release is {RELEASE_URL}")
    if filename is not None and not (data / filename).is_file():
        return FileNotFoundError(f"--file {filename}: no such file: {data / filename}")
    return None


def _rel(path: Path, root: Path) -> Path:
    try:
        return path.relative_to(root)
    except ValueError:
        return path


#: names Windows reserves for devices, with or without an extension (break28 #7): "CON", "nul.txt", "COM1"; COM0,
#: LPT0 and the superscript-digit forms (COM¹, LPT³) as Microsoft's "Naming Files" lists them
_WINDOWS_RESERVED = frozenset({"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in (*range(10), *"¹²³")),
                               *(f"LPT{i}" for i in (*range(10), *"¹²³"))})


def windows_reserved(part: str) -> bool:
    """Whether Windows cannot hold a file or folder named ``part`` (one path component) as that name: a device name
    it reserves (:data:`_WINDOWS_RESERVED`: ``CON``, ``nul.txt``, ``COM0``, ``LPT1.jpg``, ``CON .txt``), with or
    without an extension, or a name ending with a dot or a space (Windows drops them: ``a.`` is ``a``). The rule of
    :func:`safe_name`, shared by every check of a name from outside (security42 #4)."""
    return part.endswith((".", " ")) or part.split(".")[0].rstrip(" ").upper() in _WINDOWS_RESERVED


def safe_name(value: str, *, what: str = "name") -> str:
    """Return ``value`` if it is safe as a single path component, else raise ``ValueError``.

    Allowed: letters, digits, ``_ . -``; must start with a letter or digit and not end with a dot; at most 128
    characters; not a device name Windows reserves (``CON``, ``NUL``, ``COM1`` ..., with or without an extension).
    Used for campaign names, site ids and anything from an API that becomes a file name.
    """
    if not isinstance(value, str) or not _SAFE_NAME.fullmatch(value) or ".." in value:
        raise ValueError(f"unsafe {what} for a file name: {value!r}")
    if windows_reserved(value):
        raise ValueError(f"unsafe {what} for a file name: {value!r} (Windows cannot hold a file named so: a name it "
                         "reserves for a device, or one ending with a dot or a space; a state folder copied there "
                         "would lose it)")
    return value


def safe_image_id(value: str | int) -> str:
    """A Mapillary image id in its canonical form: a positive integer written as 1-32 ASCII decimal digits without
    leading zeros (``"0800000000001"`` -> ``"800000000001"``).

    Source: Mapillary Graph API v4, an image's ``id`` is a numeric id sent as a string (api-notes section 6; the
    official SDK also takes it as an integer); ids are positive, so ``"0"`` (``"00"``, ...) names no image. A
    leading zero writes the same number another way, so it names the same image: every id becomes a file name, a
    dictionary key or a request path through this function, and two spellings of one id always give one image.

    Raises
    ------
    ValueError
        Anything that is not 1-32 ASCII digits (a sign, a space, a newline, a superscript or other Unicode digit),
        and zero in any spelling; the message names the id.
    """
    text = str(value)
    if not _DIGITS.fullmatch(text):
        if isinstance(value, float):  # a JSON number past 2^64 that orjson read as a float (break34 export #7)
            raise ValueError(f"image id must be decimal digits, got the number {text} (a JSON number too large to "
                             "read exactly: write the id as a string)")
        raise ValueError(f"image id must be decimal digits, got {text!r}")
    canonical = text.lstrip("0")
    if not canonical:
        raise ValueError(f"image id must be a positive integer, got {text!r}")
    return canonical



def config_path_problem(key: str, value: str | os.PathLike[str], source: str | None, *, file: str | None = None) -> str:
    """Where a config's path ``value`` (key ``key``, e.g. ``geoverify.prompt_template``) was looked for, for an
    error that it is missing: the key, the config file ``source`` and the folder a relative path is taken from.

    Every relative path in a campaign file is taken from the working directory (``[paths]``, ``replay.path``,
    ``image_root``, prompt templates), not from the config file's folder; when ``value`` would exist relative to
    the config's folder the text says so and gives the value to write. ``file``: a file looked for inside the
    folder ``value`` (``geohint.prompts_dir``). ``source`` is the config's label
    (:attr:`geoagent.config.CampaignConfig.source`: the path as given, or ``<dict>``).

    Returns
    -------
    str
        ``geoverify.prompt_template in cfg.toml: looked for /cwd/my_claim.txt (a relative path in a config is
        taken from the directory the command runs in, /cwd, not from the config file's folder); the config's
        folder has my_claim.txt: write prompt_template = "/abs/my_claim.txt" or run the command from /abs``.
    """
    p = Path(value)
    named = source and not str(source).startswith("<")
    where = f"{key} in {source}" if named else key
    target = p / file if file else p
    if p.is_absolute():
        return f"{where}: looked for {target}"
    cwd = Path.cwd()
    text = (f"{where}: looked for {cwd / target} (a relative path in a config is taken from the directory the "
            f"command runs in, {cwd}, not from the config file's folder)")
    if named:
        cfg_dir = Path(str(source)).expanduser().resolve().parent
        if cfg_dir != cwd.resolve() and (cfg_dir / target).exists():
            # a TOML basic string, escaped (json.dumps's escapes are TOML's): a backslash or quote in the folder's
            # name, written as it was, started an escape or ended the string
            text += (f"; the config's folder has {target}: write {key.rsplit('.', 1)[-1]} = "
                     f"{json.dumps(str(cfg_dir / p), ensure_ascii=False)} "
                     f"or run the command from {cfg_dir} (then every relative path of the campaign, and its queues/ "
                     "and state/ unless [paths] or $GEOAGENT_QUEUES / $GEOAGENT_STATE set them, are taken from that "
                     "folder too: a campaign already run from here would start over there)")
    return text
