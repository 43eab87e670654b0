package node

import (
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/kvoffload/kvoffload/api/kvoffload/v1"
)

// setServing gives every name the gRPC health service answers for the one status st: ""
// (the whole server), the client API's service and, with a local socket, the local
// service. A probe that names the service it calls (a load balancer, grpc_health_probe
// -service) sees what a probe of "" sees.
func (n *Node) setServing(st healthpb.HealthCheckResponse_ServingStatus) {
	names := []string{"", pb.KVOffload_ServiceDesc.ServiceName}
	if n.cfg.Local.Socket != "" {
		names = append(names, pb.LocalKVOffload_ServiceDesc.ServiceName)
	}
	for _, name := range names {
		n.health.SetServingStatus(name, st)
	}
}
