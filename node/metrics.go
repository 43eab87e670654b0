package node

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
)

// metrics are the node's Prometheus metrics. Counters that the coordinator already keeps are
// exported by a collector reading Stats at scrape time; latencies and per-key outcomes are
// observed here. Label values are snake_case, like kvoffload_txn_events_total's kinds, and
// every series of a labelled counter exists from start-up at zero (so a rate() over a
// failure that has never happened yet is 0, not absent).
type metrics struct {
	offloadSeconds prometheus.Histogram
	offloadKeys    *prometheus.CounterVec
	offloadBytes   prometheus.Counter
	getSeconds     prometheus.Histogram
	getKeys        *prometheus.CounterVec
	getBytes       prometheus.Counter
	existsKeys     *prometheus.CounterVec
	keyFailures    *prometheus.CounterVec
	bufferedBytes  prometheus.Gauge
	bufferWaits    prometheus.Counter
	peerBuffered   prometheus.Gauge
	peerWaits      prometheus.Counter

	// buffers is the node-wide bound on the bytes the gRPC service buffers (budget.go); it
	// lives here, with its gauge, because every request of the service reaches it through
	// the node's metrics.
	buffers *budget
	// peerBuffers bounds the bytes of the reads other members forward here (ReadLocal), with
	// the same limit, apart from buffers: a BatchGet holds its bytes of buffers while it
	// waits for an owner, so if the owners' reads took them from buffers too, two members
	// reading each other's keys could each hold what the other's owner read waits for, and
	// every key would come back Unavailable after the owner deadline
	// (TestCrossReadsAtTheBudget). An owner's read waits on no other member, so this budget
	// joins no such cycle.
	peerBuffers *budget
	log         *slog.Logger
	logs        *logLimiter
}

func newMetrics(reg prometheus.Registerer, n *Node) *metrics {
	m := &metrics{
		offloadSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kvoffload_offload_batch_seconds", Help: "Latency of BatchOffload requests served by this node.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		offloadKeys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvoffload_offload_keys_total", Help: "Keys offloaded through this node, by outcome.",
		}, []string{"outcome"}),
		offloadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvoffload_offload_bytes_total", Help: "Payload bytes of keys this node stored.",
		}),
		getSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kvoffload_get_batch_seconds", Help: "Latency of BatchGet requests served by this node, until the last byte is sent.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		getKeys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvoffload_get_keys_total", Help: "Keys read through this node, by status.",
		}, []string{"status"}),
		getBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvoffload_get_bytes_total", Help: "Payload bytes returned by reads through this node.",
		}),
		existsKeys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvoffload_exists_keys_total", Help: "Keys asked about by BatchExists through this node, by presence (unknown: not confirmed with the leader).",
		}, []string{"presence"}),
		keyFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvoffload_key_failures_total", Help: "Keys of offloads and reads through this node that did not succeed, by operation, outcome and reason class.",
		}, []string{"op", "outcome", "reason"}),
		bufferedBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvoffload_buffered_bytes", Help: "Value bytes the gRPC service holds for requests in progress (bounded by MaxBufferedBytes).",
		}),
		bufferWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvoffload_buffer_waits_total", Help: "Requests that waited for buffer space (MaxBufferedBytes reached: back-pressure).",
		}),
		peerBuffered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvoffload_peer_buffered_bytes", Help: "Value bytes held for reads other members forwarded to this node, the owner (bounded by MaxBufferedBytes, apart from kvoffload_buffered_bytes).",
		}),
		peerWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvoffload_peer_buffer_waits_total", Help: "Forwarded reads that waited for buffer space.",
		}),
		log:  n.log,
		logs: newLogLimiter(failureLogRate, failureLogBurst),
	}
	m.buffers = newBudget(bufferLimit(n.cfg.Txn), m.bufferedBytes, m.bufferWaits)
	m.peerBuffers = newBudget(bufferLimit(n.cfg.Txn), m.peerBuffered, m.peerWaits)
	for _, o := range []kvoffload.Outcome{kvoffload.Stored, kvoffload.AlreadyStored, kvoffload.Conflict, kvoffload.Rejected, kvoffload.Failed} {
		m.offloadKeys.WithLabelValues(outcomeLabel(o))
	}
	for _, st := range []kvoffload.GetStatus{kvoffload.Found, kvoffload.NotFound, kvoffload.Corrupt, kvoffload.Unavailable} {
		m.getKeys.WithLabelValues(statusLabel(st))
	}
	for _, p := range []kvoffload.Presence{kvoffload.Present, kvoffload.Absent, kvoffload.InFlight, kvoffload.Unknown} {
		m.existsKeys.WithLabelValues(presenceLabel(p))
	}
	for _, fk := range failureKinds {
		for _, rc := range fk.classes {
			m.keyFailures.WithLabelValues(fk.op, fk.outcome, rc.name)
		}
		m.keyFailures.WithLabelValues(fk.op, fk.outcome, otherReason)
	}
	if reg != nil {
		reg.MustRegister(m.offloadSeconds, m.offloadKeys, m.offloadBytes, m.getSeconds, m.getKeys, m.getBytes,
			m.existsKeys, m.keyFailures, m.bufferedBytes, m.bufferWaits, m.peerBuffered, m.peerWaits, stateCollector{n}, watchCollector{n},
			buildInfoGauge(ReadBuild()))
	}
	return m
}

// observeOffload counts one BatchOffload's outcomes; each key that is not OK is also counted
// by reason class and logged (rate-limited) with the txn ID, key, outcome and reason.
func (m *metrics) observeOffload(id fsm.TxnID, res []kvoffload.KeyResult, objs []kvoffload.Object, d time.Duration) {
	m.offloadSeconds.Observe(d.Seconds())
	for i, r := range res {
		m.offloadKeys.WithLabelValues(outcomeLabel(r.Outcome)).Inc()
		if r.Outcome == kvoffload.Stored && i < len(objs) {
			m.offloadBytes.Add(float64(len(objs[i].Value)))
		}
		if !r.Outcome.OK() {
			m.keyFailed("offload", id.String(), r.Key, outcomeLabel(r.Outcome), r.Reason, r.Outcome == kvoffload.Failed)
		}
	}
}

// observeGets counts one BatchGet's statuses; Corrupt and Unavailable keys are also counted
// by reason class and logged (rate-limited).
func (m *metrics) observeGets(res []kvoffload.GetResult, d time.Duration) {
	m.getSeconds.Observe(d.Seconds())
	for _, r := range res {
		m.getKeys.WithLabelValues(statusLabel(r.Status)).Inc()
		if r.Status == kvoffload.Found {
			m.getBytes.Add(float64(r.Size))
		}
		if r.Status == kvoffload.Corrupt || r.Status == kvoffload.Unavailable {
			m.keyFailed("get", "", r.Key, statusLabel(r.Status), r.Reason, true)
		}
	}
}

// observeExists counts one BatchExists's answers; Unknown ones are logged (rate-limited).
func (m *metrics) observeExists(keys []string, ex kvoffload.ExistsResult) {
	unknown := 0
	for _, p := range ex.Keys {
		m.existsKeys.WithLabelValues(presenceLabel(p)).Inc()
		if p == kvoffload.Unknown {
			unknown++
		}
	}
	if unknown > 0 {
		if ok, dropped := m.logs.allow(); ok {
			m.log.Warn("exists: keys not confirmed with the leader", "keys", len(keys), "unknown", unknown,
				"reason", ex.Reason, "suppressed", dropped)
		}
	}
}

// keyFailed counts and logs one key that did not succeed; severe outcomes (the store's own
// failures, not the caller's) are logged as warnings, the others at info.
func (m *metrics) keyFailed(op, txnID, key, outcome, reason string, severe bool) {
	class := reasonClassOf(op, outcome, reason)
	m.keyFailures.WithLabelValues(op, outcome, class).Inc()
	ok, dropped := m.logs.allow()
	if !ok {
		return
	}
	level := slog.LevelInfo
	if severe {
		level = slog.LevelWarn
	}
	attrs := []any{"op", op, "key", key, "outcome", outcome, "reason_class", class, "reason", reason}
	if txnID != "" {
		attrs = append(attrs, "txn", txnID)
	}
	if dropped > 0 {
		attrs = append(attrs, "suppressed", dropped)
	}
	m.log.Log(context.Background(), level, "key not "+okWord(op), attrs...)
}

func okWord(op string) string {
	if op == "get" {
		return "read"
	}
	return "stored"
}

// stateCollector exports the node's state at scrape time.
type stateCollector struct{ n *Node }

var (
	descKeys      = prometheus.NewDesc("kvoffload_keys", "Live keys in the cluster metadata.", nil, nil)
	descLocalKeys = prometheus.NewDesc("kvoffload_local_keys", "Live keys whose bytes this node owns.", nil, nil)
	descLive      = prometheus.NewDesc("kvoffload_bucket_live_bytes", "Bucket bytes held by live records on this node.", nil, nil)
	descAlloc     = prometheus.NewDesc("kvoffload_bucket_allocated_bytes", "Bytes allocated by bucket files on this node.", nil, nil)
	descApplied   = prometheus.NewDesc("kvoffload_raft_applied_index", "Raft applied index.", nil, nil)
	descLeader    = prometheus.NewDesc("kvoffload_raft_leader", "1 if this node is the Raft leader.", nil, nil)
	descTxn       = prometheus.NewDesc("kvoffload_txn_events_total", "Coordinator events by kind.", []string{"kind"}, nil)
	descPayloadIn = prometheus.NewDesc("kvoffload_offload_payload_received_bytes_total", "Payload bytes offloads brought to this node over the API (gRPC chunks, or copies out of local regions); a precheck's AlreadyStored keys bring none.", nil, nil)
	descCluster   = prometheus.NewDesc("kvoffload_cluster_info", "1, labelled with the ID of the cluster this node belongs to (cluster members that know it).", []string{"cluster_id"}, nil)
)

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descKeys, descLocalKeys, descLive, descAlloc, descApplied, descLeader, descTxn, descCluster, descPayloadIn} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	if n.coord == nil || n.fsm == nil || n.raft == nil {
		return
	}
	st, err := n.layerStats()
	if err != nil {
		return
	}
	own := n.fsm.Owners()[n.cfg.ID]
	leader := 0.0
	if n.raft.IsLeader() {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(descKeys, prometheus.GaugeValue, float64(st.Meta.Keys))
	ch <- prometheus.MustNewConstMetric(descLocalKeys, prometheus.GaugeValue, float64(own.Keys))
	ch <- prometheus.MustNewConstMetric(descLive, prometheus.GaugeValue, float64(st.Buckets.LiveBytes))
	ch <- prometheus.MustNewConstMetric(descAlloc, prometheus.GaugeValue, float64(st.Buckets.AllocatedBytes))
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.GaugeValue, float64(n.raft.AppliedIndex()))
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(descPayloadIn, prometheus.CounterValue, float64(n.payloadIn.Load()))
	if id := n.ClusterID(); id != "" {
		ch <- prometheus.MustNewConstMetric(descCluster, prometheus.GaugeValue, 1, id)
	}
	t := st.Txn
	for kind, v := range map[string]uint64{
		"txn": t.Txns, "stored": t.Stored, "already_stored": t.AlreadyStored, "joined": t.Joined,
		"conflict": t.Conflicts, "rejected": t.Rejected, "failed": t.Failed, "backpressure_wait": t.Waits,
		"abort": t.Aborts, "get_corrupt": t.GetCorrupt, "removed": t.Removed,
		"recovered": t.Recovered, "recovery_abort": t.RecoveryAbort, "evicted": t.Evicted,
		"read_index_failed": t.ReadIndexFailed,
	} {
		ch <- prometheus.MustNewConstMetric(descTxn, prometheus.CounterValue, float64(v), kind)
	}
}
