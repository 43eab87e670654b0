package sim

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/kvoffload/kvoffload/third_party/raft"
)

// The simulated network of a cluster world. Every message between two members (a Raft RPC,
// or a forwarded proposal, barrier, read index or owner read) crosses one link, from its
// sender to its receiver, and its reply crosses the link back. Per message, from the link's
// own random source (seeded by the seed and the link): a latency of linkLatency to
// linkLatency+linkJitter, and a loss (one in dropOdds requests, one in dropOdds replies). A
// cut link loses every message; a member that is down receives none. Messages of one link
// sent by different goroutines (Raft's heartbeats, its replication, votes) overtake each
// other by their latencies: reordering. A lost request costs its sender lostAfter, as a
// time-out would; a lost reply comes after the request was handled (its effect stands).

// Network timing and loss.
const (
	linkLatency = 200 * time.Microsecond
	linkJitter  = 2 * time.Millisecond
	lostAfter   = 20 * time.Millisecond
	dropOdds    = 64
	raftRPCWait = 500 * time.Millisecond // InmemTransport's own time-out for a handled RPC
)

// errUnreachable is a message the network lost (a cut link, a drop, a member down).
var errUnreachable = errors.New("sim: the network lost the message")

// network is the links between n members and their current Raft transports.
type network struct {
	mu    sync.Mutex
	n     int
	cut   [][]bool       // cut[i][j]: i's messages do not reach j
	down  []bool         // member i is off: it receives nothing
	links [][]*rand.Rand // links[i][j]: the link i->j's choices
	trans []*raft.InmemTransport
	life  []int // member i's current life (attach counts them)
	drops int
	calm  bool // no message is dropped (the end of a world: only cuts lose messages)
}

func newNetwork(seed uint64, n int) *network {
	nw := &network{n: n, down: make([]bool, n), trans: make([]*raft.InmemTransport, n), life: make([]int, n)}
	for i := range n {
		nw.cut = append(nw.cut, make([]bool, n))
		nw.links = append(nw.links, make([]*rand.Rand, n))
		for j := range n {
			nw.links[i][j] = rand.New(rand.NewPCG(seed, uint64(1000+i*n+j)))
		}
	}
	return nw
}

// memberAddr is member i's Raft address (and server ID).
func memberAddr(i int) raft.ServerAddress { return raft.ServerAddress(fmt.Sprintf("m%d", i)) }

// attach gives member i a fresh Raft transport, connected both ways to every other
// member's current one (a restarted member's replaces its last), marks it up and returns
// the number of this life of i.
func (nw *network) attach(i int) (raft.Transport, int) {
	_, t := raft.NewInmemTransportWithTimeout(memberAddr(i), raftRPCWait)
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for j, o := range nw.trans {
		if j != i && o != nil {
			t.Connect(memberAddr(j), o)
			o.Connect(memberAddr(i), t)
		}
	}
	nw.life[i]++
	nw.trans[i], nw.down[i] = t, false
	return &simTransport{InmemTransport: t, nw: nw, from: i}, nw.life[i]
}

// setDown marks member i down (off) if life is still its current life: a life that ended
// cannot take the next one down.
func (nw *network) setDown(i, life int) {
	nw.mu.Lock()
	if nw.life[i] == life {
		nw.down[i] = true
	}
	nw.mu.Unlock()
}

// reachable reports whether i's messages reach j now.
func (nw *network) reachable(i, j int) bool {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return i == j || !nw.cut[i][j] && !nw.down[j] && !nw.down[i]
}

// call carries one message from i to j: handle runs on j if the request arrives, and its
// error is returned unless the reply is lost (errUnreachable).
func (nw *network) call(i, j int, handle func() error) error {
	if i == j {
		return handle()
	}
	nw.mu.Lock()
	r := nw.links[i][j]
	latency := linkLatency + time.Duration(r.Int64N(int64(linkJitter)))
	lostReq, lostReply := r.IntN(dropOdds) == 0 && !nw.calm, r.IntN(dropOdds) == 0 && !nw.calm
	nw.mu.Unlock()
	time.Sleep(latency)
	if lostReq || !nw.reachable(i, j) {
		nw.lost()
		time.Sleep(lostAfter)
		return errUnreachable
	}
	err := handle()
	if lostReply || !nw.reachable(j, i) {
		nw.lost()
		return errUnreachable
	}
	return err
}

func (nw *network) lost() {
	nw.mu.Lock()
	nw.drops++
	nw.mu.Unlock()
}

// quiet stops the random drops.
func (nw *network) quiet() {
	nw.mu.Lock()
	nw.calm = true
	nw.mu.Unlock()
}

// heal joins every link.
func (nw *network) heal() {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for i := range nw.cut {
		clear(nw.cut[i])
	}
}

// partition cuts every link between a member in side and one outside it, both ways.
func (nw *network) partition(side []bool) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for i := range nw.n {
		for j := range nw.n {
			nw.cut[i][j] = side[i] != side[j]
		}
	}
}

// cutOne cuts the link i->j only: j no longer hears i, i still hears j.
func (nw *network) cutOne(i, j int) {
	nw.mu.Lock()
	nw.cut[i][j] = true
	nw.mu.Unlock()
}

// simTransport is member from's Raft transport: raft.InmemTransport with every RPC carried
// by the network. Pipelining is off (raft then replicates one AppendEntries at a time).
type simTransport struct {
	*raft.InmemTransport
	nw   *network
	from int
}

var _ raft.WithPreVote = (*simTransport)(nil)

// to is the member a Raft address names.
func to(addr raft.ServerAddress) int {
	var j int
	fmt.Sscanf(string(addr), "m%d", &j)
	return j
}

func (t *simTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

func (t *simTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return t.nw.call(t.from, to(target), func() error { return t.InmemTransport.AppendEntries(id, target, args, resp) })
}

func (t *simTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.nw.call(t.from, to(target), func() error { return t.InmemTransport.RequestVote(id, target, args, resp) })
}

func (t *simTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.nw.call(t.from, to(target), func() error { return t.InmemTransport.RequestPreVote(id, target, args, resp) })
}

func (t *simTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return t.nw.call(t.from, to(target), func() error {
		return t.InmemTransport.InstallSnapshot(id, target, args, resp, data)
	})
}

func (t *simTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return t.nw.call(t.from, to(target), func() error { return t.InmemTransport.TimeoutNow(id, target, args, resp) })
}
