// Package api holds kvoffload's protobuf service definitions and their generated Go code
// (package kvoffloadv1). Regenerate after editing the .proto with:
//
//	go generate ./api
//
// which needs protoc (Debian: apt-get install protobuf-compiler) and the plugins
// (go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
// google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2). The generated files are committed,
// so building and testing need none of these.
package api

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative kvoffload/v1/kvoffload.proto
