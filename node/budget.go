package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvoffload/kvoffload/internal/membudget"
	"github.com/kvoffload/kvoffload/txn"
)

// budget bounds the value bytes the gRPC service buffers across all requests
// (membudget.Budget): the API's, and apart from it the reads other members forward here.
type budget = membudget.Budget

func newBudget(limit int64, held prometheus.Gauge, waits prometheus.Counter) *budget {
	return membudget.New(limit, held, waits)
}

// bufferLimit is cfg's MaxBufferedBytes, 0 meaning twice MaxBatchBytes.
func bufferLimit(cfg txn.Config) int64 {
	if cfg.MaxBufferedBytes > 0 {
		return cfg.MaxBufferedBytes
	}
	return 2 * cfg.MaxBatchBytes
}
