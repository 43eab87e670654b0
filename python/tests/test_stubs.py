"""The committed stubs are what scripts/gen.sh makes from api/kvoffload/v1/kvoffload.proto,
and they import under the installed protobuf and grpcio."""

import filecmp
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = HERE.parent


def test_stubs_match_proto(tmp_path):
    subprocess.run([str(PY / "scripts" / "gen.sh"), str(tmp_path)], check=True)
    for name in ("kvoffload_pb2.py", "kvoffload_pb2_grpc.py"):
        fresh = tmp_path / "kvoffload" / "v1" / name
        committed = PY / "src" / "kvoffload" / "v1" / name
        assert filecmp.cmp(fresh, committed, shallow=False), \
            f"{committed} differs from a fresh python/scripts/gen.sh: run it and commit the result"


def test_enums_mirror_the_wire():
    import kvoffload
    from kvoffload.v1 import kvoffload_pb2 as pb

    for enum, prefix, pbenum in [(kvoffload.Outcome, "OUTCOME_", pb.Outcome), (kvoffload.Code, "CODE_", pb.Code),
                                 (kvoffload.Presence, "PRESENCE_", pb.Presence),
                                 (kvoffload.GetStatus, "GET_STATUS_", pb.GetStatus)]:
        for name, number in pbenum.items():
            assert enum[name[len(prefix):]] == number, (name, number)
    # SHORT_BUFFER never travels (types.go); it is the client's own status.
    assert kvoffload.GetStatus.SHORT_BUFFER not in pb.GetStatus.values()
