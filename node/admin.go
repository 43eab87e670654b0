package node

import (
	"context"
	"crypto/tls"

	"github.com/kvoffload/kvoffload/internal/cluster"
)

// An operator's calls to the peer service, for tools (storenode members remove).

// OperatorTLS is the TLS configuration of an operator's call to the peer service of a
// cluster with TLS: it presents the certificate in certFile and keyFile (an operator's, OU
// OperatorUnit, or a node's own) and verifies the member's chain against the CA in caFile.
// As with members' calls to each other, members are dialed by address (a redirect names one),
// so the chain is verified, not the host name.
func OperatorTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	return cluster.OperatorTLS(certFile, keyFile, caFile)
}

// Removal is what RemoveMember did.
type Removal struct {
	// At is the peer address of the member that answered: the leader, or (without TLS) a
	// member that forwarded the call to it.
	At string
	// KeysDropped counts the keys whose bytes the node held, dropped from the metadata.
	KeysDropped uint64
}

// RemoveMember removes node id from the cluster (Cluster/Leave) through the member at peer
// address addr: over TLS with tlsConfig (OperatorTLS), or plaintext when it is nil. A member
// that is not the leader forwards the call, or, with TLS, answers with the leader's peer
// address, where RemoveMember follows it (a bounded number of times). A member that knows no
// leader yet answers Unavailable, and the call is tried again until ctx ends. An address
// where no gRPC server answers fails at once, saying what answered there; any other refusal
// is returned as it came (NotFound: id is no member and owns no keys).
func RemoveMember(ctx context.Context, addr, id string, tlsConfig *tls.Config) (Removal, error) {
	at, dropped, err := cluster.Leave(ctx, addr, id, tlsConfig)
	if err != nil {
		return Removal{}, err
	}
	return Removal{At: at, KeysDropped: dropped}, nil
}
