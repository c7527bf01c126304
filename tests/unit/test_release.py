"""`cutover build`'s release directory: concurrent builds, the manifest's checks, min_driver, one default arch list.

The build is faked here (nvcc's version and the compile are replaced), except in the tests that take the
`release` fixture, the real one built by `cutover build`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from cutover import release as rel
from cutover import resources
from cutover.errors import BuildError, ConfigError
from kernel_ext import build

LIBRARY = build.LIBRARY_NAME


def write_release(directory: Path, content: bytes, **fields) -> Path:
    """A complete release in `directory` (its id its name, its library `content`), as a build would leave it;
    `fields` replace the manifest's."""
    directory.mkdir(parents=True)
    (directory / LIBRARY).write_bytes(content)
    manifest = {"release_id": directory.name, "library": LIBRARY, "archs": ["sm_90a"], "min_driver": "580.65.06",
                "files": {LIBRARY: hashlib.sha256(content).hexdigest()}, **fields}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


@pytest.fixture
def fake_build(monkeypatch) -> dict:
    """kernel_ext.build with nvcc 13.0.88 and a compile that writes b'ours' (`hooks['compile']` runs first)."""
    hooks = {"compile": lambda out_dir: None, "nvcc": "13.0.88"}
    monkeypatch.setattr(build, "nvcc_version", lambda nvcc=None: hooks["nvcc"])

    def compile_library(out_dir, archs, nvcc=None):
        hooks["compile"](Path(out_dir))
        library = Path(out_dir) / LIBRARY
        library.write_bytes(b"ours")
        return library
    monkeypatch.setattr(build, "build_library", compile_library)
    return hooks


def release_id_of(tmp_dir: Path) -> str:
    """The release id a build's temporary directory (.tmp-<id>-<8 hex>) is for."""
    return tmp_dir.name[len(".tmp-"):-9]


def entries(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir())


# -- 1. two builds of the same sources at once ----------------------------------------------------------------

def test_a_release_another_build_finished_meanwhile_is_kept_and_ours_discarded(fake_build, tmp_path):
    out = tmp_path / "releases"
    fake_build["compile"] = lambda tmp: write_release(out / release_id_of(tmp), b"the first build's")

    result = rel.build_release(out, ["sm_90a"])

    assert result.built is False  # the first build's release is in place, and may be being staged
    assert (result.release.path / LIBRARY).read_bytes() == b"the first build's"
    assert entries(out) == sorted([result.release.release_id, "LATEST"])  # our build left nothing behind


def test_another_build_moving_in_just_before_ours_is_no_traceback(fake_build, tmp_path, monkeypatch):
    out = tmp_path / "releases"
    rename = os.rename

    def racing_rename(src, dst):  # the other build renames its release into place between our check and ours
        if Path(src).name.startswith(".tmp-") and not Path(dst).exists():
            write_release(Path(dst), b"the first build's")
        return rename(src, dst)
    monkeypatch.setattr(os, "rename", racing_rename)

    result = rel.build_release(out, ["sm_90a"])

    assert result.built is False
    assert (result.release.path / LIBRARY).read_bytes() == b"the first build's"
    assert entries(out) == sorted([result.release.release_id, "LATEST"])


def test_another_build_leaving_a_damaged_release_in_the_way_is_a_build_error_naming_it(fake_build, tmp_path,
                                                                                       monkeypatch):
    out = tmp_path / "releases"
    rename = os.rename

    def racing_rename(src, dst):
        if Path(src).name.startswith(".tmp-") and not Path(dst).exists():
            Path(dst).mkdir()
            (Path(dst) / LIBRARY).write_bytes(b"half")  # no manifest: not a release
        return rename(src, dst)
    monkeypatch.setattr(os, "rename", racing_rename)

    with pytest.raises(BuildError) as raised:
        rel.build_release(out, ["sm_90a"])

    assert raised.value.exit_code == 3
    assert "another `cutover build` of the same sources put" in raised.value.message
    assert "let the other build finish, then run `cutover build` again" in raised.value.hint
    assert not [p for p in out.iterdir() if p.name.startswith(".tmp-")]


def test_a_damaged_release_is_moved_aside_and_replaced(fake_build, tmp_path):
    out = tmp_path / "releases"
    first = rel.build_release(out, ["sm_90a"]).release
    (first.path / LIBRARY).write_bytes(b"changed after the build")

    result = rel.build_release(out, ["sm_90a"])

    assert result.built is True and rel.verify_local(result.release.path).release_id == first.release_id
    assert (result.release.path / LIBRARY).read_bytes() == b"ours"
    assert entries(out) == sorted([first.release_id, "LATEST"])  # no .old-* or .tmp-* left


# -- 2. the manifest's fields -----------------------------------------------------------------------------------

GOOD_ID = "0123456789-abcdef"


def test_a_well_formed_hand_made_release_loads(tmp_path):
    path = write_release(tmp_path / GOOD_ID, b"lib")
    assert rel.verify_local(path).release_id == GOOD_ID


def refusal(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        rel.find_release(str(path), path.parent)
    assert raised.value.exit_code == 2  # a bad input file, like a bad config: not "the kernel did not build"
    return raised.value


def test_a_release_id_that_is_a_path_and_jinja_is_refused(tmp_path):
    path = write_release(tmp_path / GOOD_ID, b"lib", release_id="../../tmp/evil {{ 7*7 }}")
    error = refusal(path)
    assert error.message == (f"{path / 'manifest.json'}: field 'release_id' must be an id as `cutover build` "
                             "makes it, found '../../tmp/evil {{ 7*7 }}'")
    assert error.hint == ("rebuild the release with `cutover build`; a release id is 10 hex digits, '-' and 6 hex "
                          "digits, e.g. 4f25ad6295-d898f2")


def test_a_release_id_other_than_its_directory_is_refused(tmp_path):
    path = write_release(tmp_path / GOOD_ID, b"lib", release_id="fedcba9876-543210")
    error = refusal(path)
    assert "field 'release_id' is 'fedcba9876-543210', but the release's directory is '0123456789-abcdef'" in str(
        error)


@pytest.mark.parametrize("name", ["/etc/hostname", "../lib.so", "python/../../lib.so", "./lib.so", "a//lib.so",
                                  "lib.so/", "lib {{ 7*7 }}.so", ""])
def test_a_file_name_outside_the_release_or_not_normalised_is_refused(tmp_path, name):
    path = write_release(tmp_path / GOOD_ID, b"lib")
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"][name] = "0" * 64
    (path / "manifest.json").write_text(json.dumps(manifest))
    error = refusal(path)
    assert error.message == (f"{path / 'manifest.json'}: field 'files' names {name!r}, which is not "
                             f"{rel.FILE_NAME_RULE}")


def test_a_library_that_is_not_one_of_files_is_refused(tmp_path):
    path = write_release(tmp_path / GOOD_ID, b"lib", library="elsewhere.so")
    assert "field 'library' is 'elsewhere.so', which is not one of files" in str(refusal(path))


@pytest.mark.parametrize("field,value", [("library", None), ("min_driver", "{{ 7*7 }}"),
                                         ("archs", ["sm_120 {{ 7*7 }}"]), ("files", {LIBRARY: "not a sha"})])
def test_other_fields_of_the_wrong_form_are_refused(tmp_path, field, value):
    path = write_release(tmp_path / GOOD_ID, b"lib", **{field: value})
    assert f"field '{field}'" in refusal(path).message


def test_a_changed_file_names_it_and_the_fix(tmp_path):
    path = write_release(tmp_path / GOOD_ID, b"lib")
    (path / LIBRARY).write_bytes(b"changed")
    error = refusal(path)
    assert str(error) == (f"release {GOOD_ID}: {LIBRARY} does not match its sha256 in the manifest\n"
                          "  fix: the file was changed after the build: rebuild with `cutover build`")


def test_stage_of_the_evil_manifest_exits_2_and_touches_nothing(invoke, local_inventory, tmp_path):
    path = write_release(tmp_path / GOOD_ID, b"lib", release_id="../../tmp/evil {{ 7*7 }}")
    result = invoke("stage", "-i", local_inventory, "--release", path)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith(f"error: {path / 'manifest.json'}: field 'release_id' must be an id")
    assert not (tmp_path / "root").exists() and not (tmp_path / "state").exists()


def test_the_built_release_passes_every_check(release):
    loaded = rel.verify_local(release)
    assert loaded.release_id == release.name and rel.RELEASE_ID_FORM.fullmatch(loaded.release_id)
    assert loaded.manifest["min_driver"] == build.min_driver(loaded.manifest["nvcc_version"])


# -- 3. min_driver follows nvcc ---------------------------------------------------------------------------------

@pytest.mark.parametrize("nvcc,driver", [("12.8.93", "570.26"), ("12.9.41", "575.51.03"), ("13.0.88", "580.65.06")])
def test_min_driver_is_that_of_the_nvcc_that_built_the_release(fake_build, tmp_path, nvcc, driver):
    fake_build["nvcc"] = nvcc
    result = rel.build_release(tmp_path / "releases", ["sm_120"])
    assert (result.release.manifest["nvcc_version"], result.release.manifest["min_driver"]) == (nvcc, driver)


@pytest.mark.parametrize("nvcc", ["12.6.85", "14.0.10"])
def test_an_nvcc_the_table_does_not_know_is_refused_before_compiling(fake_build, tmp_path, nvcc):
    fake_build["nvcc"] = nvcc
    fake_build["compile"] = lambda tmp: pytest.fail("compiled with an nvcc of unknown minimum driver")
    out = tmp_path / "releases"
    with pytest.raises(BuildError) as raised:
        rel.build_release(out, ["sm_120"])
    assert raised.value.exit_code == 3
    cuda = ".".join(nvcc.split(".")[:2])
    assert f"nvcc {nvcc} is CUDA {cuda}, whose minimum NVIDIA driver is not known to cutover" in raised.value.message
    assert "MIN_DRIVER_BY_CUDA in kernel_ext/build.py" in raised.value.hint
    assert not out.exists()


def test_every_toolkit_in_the_table_can_build_sm_120():
    assert "sm_120" in build.DEFAULT_ARCHS
    assert min(build.MIN_DRIVER_BY_CUDA) >= (12, 8)  # sm_120 needs CUDA 12.8 or later


# -- 4. one default arch list, one policy path -------------------------------------------------------------------

def test_the_default_archs_are_kernel_ext_builds(fake_build, tmp_path, monkeypatch):
    assert not hasattr(rel, "DEFAULT_ARCHS")
    monkeypatch.setattr(build, "DEFAULT_ARCHS", ("sm_120",))
    assert rel.build_release(tmp_path / "releases").release.manifest["archs"] == ["sm_120"]


def test_resources_has_no_second_policy_path():
    assert not hasattr(resources, "policies_dir")  # checks.policy.DEFAULT_POLICY_PATH is the one the product uses
