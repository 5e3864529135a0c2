"""A new user's first minutes: ``make lab``'s start-up (tools/lab.py, tools/jupyter_config/),
the README's picture (tools/readme_picture.py, docs/) and what its quick start says the first
install costs. JupyterLab itself, started as ``make lab`` starts it, is driven in a browser in
``tests/test_browser.py``."""

from __future__ import annotations

import json
import os
import platform
import re
import struct
import subprocess
import sys

import pytest
from jupyter_server.services.contents.manager import ContentsManager

from tools import lab, readme_picture

ROOT = lab.ROOT


# ----------------------------------------------------------------------------- make lab

def test_arguments_serve_only_the_learners_copies_and_open_the_start_notebook(tmp_path):
    root = tmp_path / "clone"
    (root / "notebooks").mkdir(parents=True)
    (root / "notebooks" / "00_start_here.ipynb").write_text("{}")
    lab.prepare_work(root)
    args = lab.arguments(root)
    # the originals (notebooks/, labs/) are not served beside my-work/: only my-work/ is
    assert f"--ServerApp.root_dir={root / 'my-work'}" in args
    assert f"--ServerApp.root_dir={root}" not in args
    # JupyterLab 4 redirects to its own default_url: ServerApp's would be ignored.
    assert "--LabApp.default_url=/lab/tree/notebooks/00_start_here.ipynb" in args
    assert not [a for a in args if a.startswith("--ServerApp.default_url")]
    assert f"--LabApp.workspaces_dir={root / 'my-work' / '.workspaces'}" in args
    assert lab.START_NOTEBOOK == "notebooks/00_start_here.ipynb"
    assert (ROOT / "notebooks" / "00_start_here.ipynb").is_file()


def _clone(root):
    for rel in ("notebooks/00_start_here.ipynb", "notebooks/01_a.ipynb", "labs/lab1.ipynb",
                "labs/solutions/lab1.ipynb"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f'{{"original": "{rel}"}}')


def test_the_learner_works_in_copies_that_updates_never_touch(tmp_path):
    _clone(tmp_path)
    lines = lab.prepare_work(tmp_path)
    work = tmp_path / "my-work"
    copies = sorted(p.relative_to(work).as_posix() for p in work.rglob("*.ipynb"))
    assert copies == ["labs/lab1.ipynb", "notebooks/00_start_here.ipynb", "notebooks/01_a.ipynb"]
    assert lines and "copied 3 notebooks" in lines[0]
    # the learner fills in lab 1; then an update changes lab 1 and notebook 01, and adds 02
    (work / "labs" / "lab1.ipynb").write_text('{"mine": true}')
    (tmp_path / "labs" / "lab1.ipynb").write_text('{"original": "lab1, version 2"}')
    (tmp_path / "notebooks" / "01_a.ipynb").write_text('{"original": "01, version 2"}')
    (tmp_path / "notebooks" / "02_b.ipynb").write_text('{"original": "02"}')
    lines = lab.prepare_work(tmp_path)
    assert (work / "labs" / "lab1.ipynb").read_text() == '{"mine": true}'      # kept
    assert (work / "notebooks" / "02_b.ipynb").exists()                        # new: copied
    assert lines[0].startswith("copied 1 notebook into my-work/")
    changed = [ln for ln in lines if "was updated after you copied it" in ln]
    assert [ln.split()[0] for ln in changed] == ["notebooks/01_a.ipynb", "labs/lab1.ipynb"]
    # a copy deleted by the learner comes back as the new version, and is no longer reported
    (work / "labs" / "lab1.ipynb").unlink()
    lines = lab.prepare_work(tmp_path)
    assert (work / "labs" / "lab1.ipynb").read_text() == '{"original": "lab1, version 2"}'
    assert [ln.split()[0] for ln in lines if "updated" in ln] == ["notebooks/01_a.ipynb"]


def test_the_work_folder_is_ignored_by_git():
    ignored = (ROOT / ".gitignore").read_text().split()
    assert f"{lab.WORK_DIR}/" in ignored


def test_a_missing_start_notebook_is_refused_by_name(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"^start: .*00_start_here\.ipynb does not exist"):
        lab.arguments(tmp_path)
    (tmp_path / "my-work").mkdir()
    (tmp_path / "my-work" / "first.ipynb").write_text("{}")
    assert "--LabApp.default_url=/lab/tree/first.ipynb" in lab.arguments(tmp_path, "first.ipynb")


def test_environment_ranks_the_workbook_config_below_the_learners():
    env = {"JUPYTER_CONFIG_PATH": "/etc/site-a" + os.pathsep + "/etc/site-b", "HOME": "/home/x",
           "JUPYTER_CONFIG_DIR": "/home/x/.jupyter"}
    out = lab.environment(env)
    assert out["JUPYTER_CONFIG_PATH"].split(os.pathsep) == [
        "/home/x/.jupyter", "/etc/site-a", "/etc/site-b", str(lab.CONFIG_DIR)]
    assert out["HOME"] == "/home/x"
    assert env["JUPYTER_CONFIG_PATH"] == "/etc/site-a" + os.pathsep + "/etc/site-b"  # not changed
    assert lab.environment({})["JUPYTER_CONFIG_PATH"].split(os.pathsep)[-1] == str(lab.CONFIG_DIR)


def _hide_globs(env) -> list[str]:
    """The file browser's hide_globs that a Jupyter server started with ``env`` would use."""
    code = ("from jupyter_server.serverapp import ServerApp; app = ServerApp(); "
            "app.load_config_file(); print(json.dumps(app.config.ContentsManager.hide_globs))")
    done = subprocess.run([sys.executable, "-c", "import json; " + code], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_workbook_config_applies_and_the_learners_own_wins(tmp_path):
    base = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    mine = tmp_path / "mine"
    mine.mkdir()
    env = lab.environment({**base, "JUPYTER_CONFIG_DIR": str(mine)})
    assert "*.egg-info" in _hide_globs(env)
    (mine / "jupyter_server_config.json").write_text(
        json.dumps({"ContentsManager": {"hide_globs": ["my_private_folder"]}}))
    assert _hide_globs(env) == ["my_private_folder"]


def test_file_browser_hides_build_and_packaging_folders_and_keeps_jupyters_own():
    config = json.loads((lab.CONFIG_DIR / "jupyter_server_config.json").read_text())
    globs = config["ContentsManager"]["hide_globs"]
    assert {"*.egg-info", "build"} <= set(globs)
    assert set(ContentsManager().hide_globs) <= set(globs)  # the defaults are not lost
    # What a learner opens stays visible.
    manager = ContentsManager(hide_globs=globs)
    assert [n for n in ("gpu_cnn_workbook.egg-info", "build", "__pycache__")
            if not manager.should_list(n)] == ["gpu_cnn_workbook.egg-info", "build", "__pycache__"]
    assert all(manager.should_list(n) for n in ("notebooks", "labs", "helpers", "README.md",
                                                 "results", "00_start_here.ipynb"))


def test_news_prompt_and_update_checks_are_off_by_default():
    overrides = json.loads((lab.CONFIG_DIR / "labconfig" / "default_setting_overrides.json")
                           .read_text())
    assert overrides == {"@jupyterlab/apputils-extension:notification": {
        "fetchNews": "false", "checkForUpdates": False}}


def test_make_lab_runs_tools_lab():
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^lab: env\n\t(.+)$", makefile, re.M).group(1)
    assert "-m tools.lab" in recipe and "--port $(PORT)" in recipe


# ----------------------------------------------------------------------------- README picture

FACTS = {"device": "CPU: Some CPU (4 cores)", "date": "2030-01-02",
         "notebook": "notebooks/06_head_to_head.ipynb", "layer_before": "(2, 32, 16, 5, 1)",
         "layer_after": "(2, 32, 16, 6, 1)", "measured": "4 of 5", "seconds": 0.7,
         "busy_processes": 2}
README = (f"# Title\n\nIntro.\n\n{readme_picture.START}\nold caption\n{readme_picture.END}"
          "\n\nMore.\n")


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def test_readme_shows_the_published_picture_with_its_caption():
    readme = (ROOT / "README.md").read_text()
    facts = json.loads(readme_picture.META.read_text())
    assert set(readme_picture.KEYS) <= set(facts)
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", facts["date"])
    assert readme_picture.with_caption(readme, facts) == readme  # the caption is the facts'
    # near the top: the picture comes before the quick start
    assert readme.index(readme_picture.START) < readme.index("## Quick start")
    width, height = png_size(readme_picture.PICTURE)
    assert width >= 1000 and height >= 600, (width, height)
    assert readme_picture.PICTURE.stat().st_size < 1_000_000


def test_caption_states_device_date_and_the_layers():
    text = readme_picture.caption(FACTS)
    assert text.startswith("![") and "(docs/readme_explorer.png)" in text
    for value in ("CPU: Some CPU (4 cores)", "2030-01-02", "(2, 32, 16, 5, 1)",
                  "(2, 32, 16, 6, 1)", "4 of 5", "0.7 s",
                  "while 2 other CPU-bound processes kept its cores busy"):
        assert value in text
    # measured on an idle machine, the caption says nothing of load
    idle = readme_picture.caption({**FACTS, "busy_processes": 0})
    assert "busy" not in idle and "CPU: Some CPU (4 cores), 2030-01-02" in idle
    facts = dict(FACTS)
    del facts["device"]
    with pytest.raises(KeyError, match="lack 'device'"):
        readme_picture.caption(facts)


def test_with_caption_replaces_only_between_the_markers():
    out = readme_picture.with_caption(README, FACTS)
    assert "old caption" not in out and "CPU: Some CPU (4 cores)" in out
    assert out.startswith("# Title\n\nIntro.\n\n") and out.endswith("\n\nMore.\n")
    assert readme_picture.with_caption(out, FACTS) == out
    for broken in ("# no markers\n", README.replace(readme_picture.END, ""),
                   f"{readme_picture.END}\n{readme_picture.START}\n"):
        with pytest.raises(ValueError, match="^readme: needs"):
            readme_picture.with_caption(broken, FACTS)


def test_publish_copies_the_picture_and_rewrites_the_caption(tmp_path):
    source = tmp_path / "browser"
    source.mkdir()
    (source / "readme_explorer.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    (source / "readme_explorer.json").write_text(json.dumps(FACTS))
    picture, meta, readme = tmp_path / "docs" / "p.png", tmp_path / "docs" / "p.json", \
        tmp_path / "README.md"
    readme.write_text(README)
    assert readme_picture.publish(source, picture, meta, readme) == FACTS
    assert picture.read_bytes() == b"\x89PNG\r\n\x1a\nfake"
    assert json.loads(meta.read_text()) == FACTS
    assert "2030-01-02" in readme.read_text()


def test_publish_without_a_screenshot_writes_nothing(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(README)
    picture, meta = tmp_path / "docs" / "p.png", tmp_path / "docs" / "p.json"
    with pytest.raises(FileNotFoundError, match="^source: no .*readme_explorer.png"):
        readme_picture.publish(tmp_path / "empty", picture, meta, readme)
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "readme_explorer.png").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match="readme_explorer.json"):
        readme_picture.publish(tmp_path / "partial", picture, meta, readme)
    assert readme.read_text() == README and not (tmp_path / "docs").exists()


# ----------------------------------------------------------------------------- the first install

def in_the_workbook_venv_on_linux_x86_64() -> None:
    """Skip unless the tests run in the workbook's own ``.venv`` on Linux x86-64: the README's
    numbers are for that install."""
    if os.path.realpath(sys.prefix) != os.path.realpath(ROOT / ".venv"):
        pytest.skip("not running in the workbook's .venv")
    if sys.platform != "linux" or platform.machine() != "x86_64":
        pytest.skip("the README's numbers are for Linux x86-64")


def lock_download_bytes() -> tuple[int, int]:
    """(packages, bytes) the first install downloads: for each distribution installed in this
    environment, the size ``uv.lock`` records for the wheel of that version that best matches
    this interpreter (:func:`packaging.tags.sys_tags`)."""
    import importlib.metadata
    import tomllib

    from packaging.tags import sys_tags
    from packaging.utils import canonicalize_name, parse_wheel_filename

    tags = {t: i for i, t in enumerate(sys_tags())}
    installed = {canonicalize_name(d.metadata["Name"]): d.version
                 for d in importlib.metadata.distributions()}
    count = total = 0
    for package in tomllib.loads((ROOT / "uv.lock").read_text())["package"]:
        if installed.get(canonicalize_name(package["name"])) != package.get("version"):
            continue
        sizes = []
        for wheel in package.get("wheels", []):
            ranks = [tags[t] for t in parse_wheel_filename(wheel["url"].rsplit("/", 1)[-1])[3]
                     if t in tags]
            if ranks:
                sizes.append((min(ranks), wheel.get("size", 0)))
        if sizes:
            count += 1
            total += min(sizes)[1]
    return count, total


def quick_start() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme[readme.index("## Quick start"):readme.index("\n## ", readme.index("## Quick"))]


def test_quick_start_states_the_download_and_the_disk():
    """The quick start says what the first install downloads and how much disk it takes, and
    (in the workbook's .venv) these are this install's: the lock file's wheel sizes to a tenth
    of a GB, and the environment's size to 10 %. They follow a version change."""
    download = re.search(r"downloads\s+about (\d+\.\d) GB \((\d+) packages", quick_start())
    disk = re.search(r"takes about (\d+\.\d) GB of\s+disk in `\.venv/`", quick_start())
    assert download and disk, "the quick start must say what the first install downloads and takes"
    assert re.search(r"install took \d+ s\s", quick_start())
    in_the_workbook_venv_on_linux_x86_64()
    count, total = lock_download_bytes()
    assert abs(float(download.group(1)) - total / 1e9) <= 0.1, (download.group(0), total)
    assert abs(int(download.group(2)) - count) <= 10, (download.group(0), count)
    venv = ROOT / ".venv"
    size = sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(venv) for f in fs)
    assert abs(float(disk.group(1)) - size / 1e9) <= 0.1 * size / 1e9, (disk.group(0), size)
