"""A member's refusal (internal/wire/refusal.go): gRPC UNAVAILABLE carrying a
google.rpc.ErrorInfo of the domain "kvoffload.v1.KVOffload" in the google.rpc.Status of the
"grpc-status-details-bin" trailer (AIP-193). The member fail-stopped (FAIL_STOPPED) or was
removed from the cluster (NODE_REMOVED): final for that member, nothing of the call was done
there, and the client never sends the call to it again.

The two messages are declared here from their published definitions
(googleapis google/rpc/status.proto and error_details.proto), so that the protobuf runtime
decodes them without the googleapis-common-protos package."""

from __future__ import annotations

from typing import Optional

import grpc
from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

ERROR_DOMAIN = "kvoffload.v1.KVOffload"
REASON_FAIL_STOPPED = "FAIL_STOPPED"
REASON_REMOVED = "NODE_REMOVED"
_DETAILS_TRAILER = "grpc-status-details-bin"


def _messages():
    f = descriptor_pb2.FileDescriptorProto(name="kvoffload/_google_rpc.proto", package="google.rpc",
                                           syntax="proto3", dependency=["google/protobuf/any.proto"])
    T = descriptor_pb2.FieldDescriptorProto
    st = f.message_type.add(name="Status")
    st.field.add(name="code", number=1, type=T.TYPE_INT32, label=T.LABEL_OPTIONAL)
    st.field.add(name="message", number=2, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    st.field.add(name="details", number=3, type=T.TYPE_MESSAGE, label=T.LABEL_REPEATED,
                 type_name=".google.protobuf.Any")
    info = f.message_type.add(name="ErrorInfo")
    info.field.add(name="reason", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    info.field.add(name="domain", number=2, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(any_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(f)
    get = getattr(message_factory, "GetMessageClass", None)  # protobuf >= 4.22
    if get is None:
        get = message_factory.MessageFactory(pool).GetPrototype
    return get(pool.FindMessageTypeByName("google.rpc.Status")), get(pool.FindMessageTypeByName("google.rpc.ErrorInfo"))


_Status, _ErrorInfo = _messages()


def reason(err: BaseException) -> Optional[str]:
    """The refusal's reason when err is a member's refusal, else None."""
    if not isinstance(err, grpc.RpcError) or not hasattr(err, "code") or err.code() != grpc.StatusCode.UNAVAILABLE:
        return None
    try:
        trailers = err.trailing_metadata() or ()
    except Exception:  # an RpcError that carries no call (raised by the client itself)
        return None
    for k, v in trailers:
        if k != _DETAILS_TRAILER:
            continue
        if not isinstance(v, bytes):
            return None
        # A malformed trailer is no refusal: the error is then handled by its code alone.
        try:
            st = _Status()
            st.ParseFromString(v)
            for d in st.details:
                if d.type_url.endswith("/google.rpc.ErrorInfo"):
                    info = _ErrorInfo()
                    info.ParseFromString(d.value)
                    if info.domain == ERROR_DOMAIN:
                        return info.reason
        except Exception:
            return None
    return None


def describe(addr: str, why: str) -> str:
    """What a refusal means for the operator, as the Go client words it (client/retry.go)."""
    if why == REASON_FAIL_STOPPED:
        return f"member {addr} has fail-stopped (it serves nothing until its process is restarted)"
    if why == REASON_REMOVED:
        return f"member {addr} was removed from the cluster"
    return f"member {addr} refuses every call ({why})"
