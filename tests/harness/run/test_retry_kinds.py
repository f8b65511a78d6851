"""Infrastructure errors say whether a retry can help, and ``--retry-errors`` re-runs only those that can
(``--retry-unretryable`` the others too), through the real command line."""

from __future__ import annotations

import orjson
import pytest

from harness.episode.blame import classify_failure
from harness.llm import EndpointUnreachable, ModelHandlerError, RequestRejected, RetriesExhausted
from harness.sandbox import SandboxError
from harness.schema import Failure, FailureKind, FailureParty, TerminationReason
from tests.support.cli_process import harness
from tests.support.stored_runs import lines_of


@pytest.mark.parametrize(
    ("error", "kind", "retryable"),
    [
        (EndpointUnreachable("nothing answers", model="m"), FailureKind.ENDPOINT_UNREACHABLE, True),
        (RetriesExhausted("503 six times", attempts=6, model="m"), FailureKind.TRANSIENT, True),
        (RequestRejected("400: bad request", model="m"), FailureKind.REQUEST_REJECTED, False),
        (ModelHandlerError("raised", model="m"), FailureKind.MODEL_HANDLER, False),
        (SandboxError("zygote lost"), FailureKind.SANDBOX, True),
        (RuntimeError("user policy failed"), FailureKind.HARNESS, True),
    ],
)
def test_each_infrastructure_error_records_its_kind_and_whether_to_retry(error, kind, retryable):
    reason, _, failure = classify_failure(error, "user")
    assert reason is TerminationReason.INFRA_ERROR
    assert failure is not None and failure.kind is kind and failure.retryable is retryable


def test_a_record_without_a_kind_still_loads_as_retryable_unknown():
    failure = Failure.model_validate({"at_fault": "harness", "detail": "old"})
    assert failure.kind is None and failure.retryable is None


def test_retry_errors_reruns_only_what_a_retry_can_help(tmp_path):
    run = tmp_path / "run"
    args = ["run", "--agent", "oracle", "--scenario", "banking-001", "--scenario", "car_rental-001", "--out", str(run)]
    assert harness(args).code == 0
    lines = lines_of(run)
    assert len(lines) == 2
    kinds = [FailureKind.TRANSIENT, FailureKind.REQUEST_REJECTED]
    for line, kind in zip(lines, kinds, strict=True):
        line.update(
            termination="infra_error",
            termination_detail=f"agent: {kind.value}",
            reward=None,
            check_results=[],
            failure=Failure(at_fault=FailureParty.MODEL_ENDPOINT, detail="x", kind=kind).model_dump(mode="json"),
        )
    (run / "results.jsonl").write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    retryable, unretryable = lines[0]["episode_id"], lines[1]["episode_id"]

    resumed = harness([*args, "--resume", "--retry-errors"])
    after = lines_of(run)
    assert [line["episode_id"] for line in after[2:]] == [retryable]
    assert after[2]["termination"] == "agent_done"
    assert resumed.code == 1  # the unretryable error stands, so not everything asked was done
    assert "not retryable: request_rejected" in resumed.stdout + resumed.stderr

    again = harness([*args, "--resume", "--retry-errors", "--retry-unretryable"])
    assert again.code == 0, again.stderr
    assert [line["episode_id"] for line in lines_of(run)[3:]] == [unretryable]
