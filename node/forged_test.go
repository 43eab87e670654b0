package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload"
	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
	"github.com/kvoffload/kvoffload/fsm"
)

// The forged-COMMIT attacks (defence in depth below authentication). Each test acknowledges
// real keys on a single node, sends a hand-made COMMIT through the Cluster service's Propose
// as a peer would (or, to model a replica that skipped the leader's check, straight through
// Raft), and then checks that every acknowledged key still reads back, that the forged key
// never reads as stored, and that the node restarts.

// forgedSetup opens a node in dir and acknowledges keys; it returns the node and the
// acknowledged entries.
func forgedSetup(t *testing.T, dir string, keys ...string) (*Node, []fsm.Entry) {
	t.Helper()
	n := mustOpen(t, testConfig(dir))
	mustOffload(t, n, objects(7, 64<<10, keys...))
	var es []fsm.Entry
	for _, k := range keys {
		e, ok := n.FSM().Lookup(k)
		if !ok {
			t.Fatalf("acknowledged key %s has no metadata", k)
		}
		es = append(es, e)
	}
	return n, es
}

// proposeAs sends a COMMIT of entries in n's own name through Cluster/Propose; caller, if not
// empty, is the node ID of the certificate the call arrives with.
func proposeAs(n *Node, caller string, entries ...fsm.Entry) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if caller != "" {
		cert := &x509.Certificate{Subject: pkix.Name{CommonName: caller}}
		ctx = peer.NewContext(ctx, &peer.Peer{AuthInfo: credentials.TLSInfo{
			State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}}})
	}
	cmd := fsm.EncodeCommit(fsm.Commit{TxnID: kvoffload.NewTxnID(), Node: n.cfg.ID, Entries: entries})
	_, err := clusterService{n: n}.Propose(ctx, &pb.ProposeRequest{Command: cmd})
	return err
}

// applyForged commits entries in n's name straight through Raft, past the leader's check: the
// path a COMMIT accepted before these checks existed took. It returns the outcome of each.
func applyForged(t *testing.T, n *Node, entries ...fsm.Entry) []fsm.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := n.Raft().Propose(ctx, fsm.EncodeCommit(fsm.Commit{TxnID: kvoffload.NewTxnID(), Node: n.cfg.ID, Entries: entries}))
	if err != nil {
		t.Fatalf("apply forged commit: %v", err)
	}
	var out []fsm.Outcome
	for _, k := range res.Keys {
		out = append(out, k.Outcome)
	}
	return out
}

// wantRefused asserts err is InvalidArgument mentioning each of parts.
func wantRefused(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("%s: %v, want InvalidArgument", what, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %q does not say %q", what, err, p)
		}
	}
}

// wantNotStored asserts key reads as anything but Found, and, after at most one Corrupt
// answer (the repair), NotFound.
func wantNotStored(t *testing.T, n *Node, key string) {
	t.Helper()
	for i := range 2 {
		res, err := n.BatchGet(context.Background(), []string{key})
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		switch r := res[0]; {
		case r.Status == kvoffload.NotFound:
			return
		case r.Status == kvoffload.Corrupt && i == 0:
			t.Logf("forged key %s: %s %s", key, r.Status, r.Reason)
		default:
			t.Fatalf("forged key %s, read %d: %s %s", key, i+1, r.Status, r.Reason)
		}
	}
	t.Fatalf("forged key %s is still in the metadata after its repair", key)
}

// restartReadable closes n, opens it again and checks every key in keys reads back.
func restartReadable(t *testing.T, n *Node, dir string, keys ...string) *Node {
	t.Helper()
	mustClose(t, n)
	n = mustOpen(t, testConfig(dir))
	checkReadable(t, n, 7, 64<<10, keys...)
	return n
}

// A COMMIT for a key whose bytes do not exist, forwarded by another node in this node's name,
// is refused: a node commits only its own bytes. Unauthenticated (no identity), the leader
// cannot tell, and the key is corrupt metadata: Corrupt once, then NotFound.
func TestForgedCommitNoBytes(t *testing.T) {
	dir := t.TempDir()
	keys := []string{keyOf("nob", 0), keyOf("nob", 1)}
	n, _ := forgedSetup(t, dir, keys...)
	ghost := fsm.Entry{Key: keyOf("ghost", 0), Extent: fsm.Extent{Bucket: 99, Offset: 0, Length: 4096}, Size: 100, Sum: 1, Gen: 1}
	wantRefused(t, "a COMMIT in node1's name from node2", proposeAs(n, "node2", ghost), `owner "node1"`, `node "node2"`)
	if ex := mustExists(n.BatchExists(context.Background(), []string{ghost.Key}, 0)); ex.Keys[0] == kvoffload.Present {
		t.Fatalf("refused forged key is %s", ex.Keys[0])
	}
	if err := proposeAs(n, "", ghost); err != nil {
		t.Fatalf("unauthenticated forged COMMIT of a well-formed entry: %v (nothing can tell it apart)", err)
	}
	wantNotStored(t, n, ghost.Key)
	checkReadable(t, n, 7, 64<<10, keys...)
	n = restartReadable(t, n, dir, keys...)
	defer mustClose(t, n)
	checkConsistent(t, n)
}

// A COMMIT naming another key's extent is refused by the leader and, past the leader, by
// apply on every replica; the acknowledged key whose bytes it named stays readable.
func TestForgedCommitOtherKeysExtent(t *testing.T) {
	dir := t.TempDir()
	keys := []string{keyOf("oke", 0), keyOf("oke", 1), keyOf("oke", 2)}
	n, es := forgedSetup(t, dir, keys...)
	victim := es[1]
	forged := victim
	forged.Key = keyOf("oke-forged", 0) // same length as the victim's key, so the extent is consistent
	wantRefused(t, "a COMMIT naming another key's extent", proposeAs(n, "", forged), "overlaps", victim.Key)
	inside := forged
	inside.Extent.Offset, inside.Extent.Length, inside.Size = victim.Extent.Offset+4096, 4096, 100
	wantRefused(t, "a COMMIT naming part of another key's extent", proposeAs(n, "", inside), "overlaps", victim.Key)
	if got := applyForged(t, n, forged, inside); got[0] != fsm.OutcomeInvalid || got[1] != fsm.OutcomeInvalid {
		t.Fatalf("apply of overlapping entries: %v, want invalid", got)
	}
	wantNotStored(t, n, forged.Key)
	wantNotStored(t, n, inside.Key)
	checkReadable(t, n, 7, 64<<10, keys...)
	n = restartReadable(t, n, dir, keys...)
	defer mustClose(t, n)
	checkConsistent(t, n)
}

// A COMMIT with a misaligned extent is refused by the leader. One that got into the
// metadata anyway (past the leader) reads Corrupt, is removed, and does not stop the node
// from starting, whether or not it was read first.
func TestForgedCommitMisaligned(t *testing.T) {
	dir := t.TempDir()
	keys := []string{keyOf("mis", 0), keyOf("mis", 1)}
	n, es := forgedSetup(t, dir, keys...)
	bad := fsm.Entry{Key: keyOf("mis-forged", 0), Extent: fsm.Extent{Bucket: es[0].Extent.Bucket, Offset: es[1].Extent.Offset + es[1].Extent.Length + 100, Length: 4096}, Size: 100, Sum: 1, Gen: 1}
	wantRefused(t, "a misaligned COMMIT", proposeAs(n, "", bad), "not aligned to 4096")
	read := bad
	read.Key, read.Extent.Offset = keyOf("mis-forged", 1), bad.Extent.Offset+8192
	if got := applyForged(t, n, bad, read); got[0] != fsm.OutcomeStored || got[1] != fsm.OutcomeStored {
		t.Fatalf("apply of misaligned entries: %v (apply leaves the format checks to the leader and the readers)", got)
	}
	wantNotStored(t, n, read.Key)
	checkReadable(t, n, 7, 64<<10, keys...)
	n = restartReadable(t, n, dir, keys...) // bad.Key was never read: start-up removes it
	defer mustClose(t, n)
	if _, rep := n.Recovery(); rep.CorruptKeys != 1 {
		t.Errorf("recovery removed %d corrupt entries, want 1", rep.CorruptKeys)
	}
	if _, ok := n.FSM().Lookup(bad.Key); ok {
		t.Errorf("misaligned entry %s still in the metadata after start-up", bad.Key)
	}
	checkConsistent(t, n)
}

// A COMMIT with a 16 TiB extent is refused by the leader (naming the record size of the
// largest object accepted) and by apply. An entry that is long but not impossibly so, with a
// Size that does not match it, reads Corrupt without allocating its length.
func TestForgedCommitHugeExtent(t *testing.T) {
	dir := t.TempDir()
	keys := []string{keyOf("huge", 0), keyOf("huge", 1)}
	n, es := forgedSetup(t, dir, keys...)
	b := es[1].Extent.Bucket
	huge := fsm.Entry{Key: keyOf("huge-forged", 0), Extent: fsm.Extent{Bucket: b, Offset: 1 << 30, Length: 16 << 40}, Size: 100, Sum: 1, Gen: 1}
	wantRefused(t, "a 16 TiB extent", proposeAs(n, "", huge), "17592186044416", "1073745920")
	limit := n.cfg.Txn.MaxRecordLen()
	big := huge
	big.Size = uint32(n.cfg.Txn.MaxObjectBytes) + 8192 // past the MaxKeyBytes slack of the limit
	big.Extent.Length = fsm.RecordLength(len(big.Key), big.Size)
	wantRefused(t, "an object over MaxObjectBytes", proposeAs(n, "", big), "largest object accepted", strconv.FormatInt(limit, 10))
	incons := huge
	incons.Key, incons.Size, incons.Extent.Length = keyOf("huge-forged", 1), 4096, fsm.MaxRecordLength
	wantRefused(t, "a Size inconsistent with the Length", proposeAs(n, "", incons), "a record of a")
	if got := applyForged(t, n, huge, incons); got[0] != fsm.OutcomeInvalid || got[1] != fsm.OutcomeStored {
		t.Fatalf("apply of a 16 TiB and a 1 GiB extent: %v, want invalid, stored", got)
	}
	wantNotStored(t, n, huge.Key)
	res, err := n.BatchGet(context.Background(), []string{keys[0], incons.Key, keys[1]})
	if err != nil {
		t.Fatalf("a batch holding an inconsistent entry: %v (its Size must not count against the batch)", err)
	}
	if res[1].Status != kvoffload.Corrupt || res[0].Status != kvoffload.Found || res[2].Status != kvoffload.Found {
		t.Fatalf("batch with an inconsistent entry: %s %s %s", res[0].Status, res[1].Status, res[2].Status)
	}
	wantNotStored(t, n, incons.Key)
	n = restartReadable(t, n, dir, keys...)
	defer mustClose(t, n)
	checkConsistent(t, n)
}
