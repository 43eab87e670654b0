"""The client's retry rules against a scripted in-process KVOffload server (no storenode):
an attempt whose outcome is unknown is resent with the same txn ID; when the retried
attempt finds every key Failed with CODE_ABORTED, the batch is resent once under a fresh ID
(client/offload.go batchOffload); a refused request is not retried."""

from concurrent import futures

import grpc
import pytest

import kvoffload
from kvoffload import Code, Outcome
from kvoffload.v1 import kvoffload_pb2 as pb
from kvoffload.v1 import kvoffload_pb2_grpc as pbg


class Scripted(pbg.KVOffloadServicer):
    def __init__(self, script):
        self.script = list(script)  # one entry per attempt: a grpc.StatusCode, or an Outcome/Code pair
        self.attempts = []  # (txn_id, keys, sizes, chunk sizes)

    def BatchOffload(self, request_iterator, context):
        txn, keys, sizes, chunks = None, [], [], []
        for ch in request_iterator:
            if ch.txn_id:
                txn = ch.txn_id
            if ch.key:
                keys.append(ch.key)
                sizes.append(ch.size)
            chunks.append(len(ch.data))
        self.attempts.append((txn, keys, sizes, chunks))
        step = self.script.pop(0)
        if isinstance(step, grpc.StatusCode):
            context.abort(step, f"scripted {step.name}")
        outcome, code = step
        return pb.OffloadResponse(results=[pb.KeyResult(key=k, outcome=outcome, code=code, reason="scripted")
                                           for k in keys])


@pytest.fixture
def scripted():
    servers = []

    def start(script):
        svc = Scripted(script)
        server = grpc.server(futures.ThreadPoolExecutor(4))
        pbg.add_KVOffloadServicer_to_server(svc, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return svc, f"127.0.0.1:{port}"

    yield start
    for s in servers:
        s.stop(0)


def test_indeterminate_attempt_is_resent_with_the_same_txn_id(scripted):
    svc, addr = scripted([grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                          (pb.OUTCOME_STORED, pb.CODE_NONE)])
    with kvoffload.Client([addr], retry_backoff=0.01) as c:
        tid = kvoffload.new_txn_id()
        value = bytes(range(256)) * 9000  # 2.2 MiB: three chunks
        res = c.batch_offload(tid, [("a", value), ("b", b"x")])
    assert [r.outcome for r in res] == [Outcome.STORED, Outcome.STORED]
    assert [a[0] for a in svc.attempts] == [bytes(tid)] * 3
    txn, keys, sizes, chunks = svc.attempts[0]
    assert keys == ["a", "b"] and sizes == [len(value), 1]
    assert max(chunks) == 1 << 20 and sum(chunks) == len(value) + 1  # at most 1 MiB a chunk


def test_all_aborted_after_a_retry_renews_the_txn_id_once(scripted):
    svc, addr = scripted([grpc.StatusCode.UNAVAILABLE, (pb.OUTCOME_FAILED, pb.CODE_ABORTED),
                          (pb.OUTCOME_STORED, pb.CODE_NONE)])
    with kvoffload.Client([addr], retry_backoff=0.01) as c:
        tid = kvoffload.new_txn_id()
        res = c.batch_offload(tid, [("a", b"1")])
    assert res[0].outcome == Outcome.STORED
    ids = [a[0] for a in svc.attempts]
    assert ids[0] == ids[1] == bytes(tid) and ids[2] != bytes(tid) and len(ids[2]) == 16


def test_aborted_on_the_first_attempt_is_a_result(scripted):
    svc, addr = scripted([(pb.OUTCOME_FAILED, pb.CODE_ABORTED)])
    with kvoffload.Client([addr]) as c:
        res = c.batch_offload(kvoffload.new_txn_id(), [("a", b"1")])
    assert (res[0].outcome, res[0].code) == (Outcome.FAILED, Code.ABORTED) and len(svc.attempts) == 1


def test_refusals_are_not_retried(scripted):
    svc, addr = scripted([grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED,
                          grpc.StatusCode.UNAUTHENTICATED])
    with kvoffload.Client([addr]) as c:
        for exc in (kvoffload.InvalidArgumentError, kvoffload.TooLargeError, kvoffload.DeniedError):
            with pytest.raises(exc, match="scripted") as e:
                c.batch_offload(kvoffload.new_txn_id(), [("a", b"1")])
            assert e.value.reason.startswith("scripted")
    assert len(svc.attempts) == 3


def test_gives_up_indeterminate_with_the_deadline(scripted):
    svc, addr = scripted([grpc.StatusCode.UNAVAILABLE] * 100)
    with kvoffload.Client([addr], retry_backoff=0.01, timeout=0.5) as c:
        with pytest.raises(kvoffload.IndeterminateError, match="UNAVAILABLE"):
            c.batch_offload(kvoffload.new_txn_id(), [("a", b"1")])
    with kvoffload.Client([addr], retry_backoff=0.01, max_attempts=3) as c:
        n = len(svc.attempts)
        with pytest.raises(kvoffload.IndeterminateError, match="3 attempts"):
            c.batch_offload(kvoffload.new_txn_id(), [("a", b"1")])
        assert len(svc.attempts) - n == 3


def test_unknown_code_kept_as_number(scripted):
    svc, addr = scripted([(pb.OUTCOME_REJECTED, 99)])
    with kvoffload.Client([addr]) as c:
        r = c.batch_offload(kvoffload.new_txn_id(), [("a", b"1")])[0]
    assert r.outcome == Outcome.REJECTED and r.code == 99 and not isinstance(r.code, Code)
