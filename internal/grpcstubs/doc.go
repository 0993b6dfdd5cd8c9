// Package grpcstubs holds gRPC-Go client and server stubs of the API's
// services, generated from api/proto by protoc-gen-go-grpc (see
// scripts/gen-grpcstubs.sh) over the messages of api/cronoqv1. Only tests
// use it: they talk to nodes as a plain gRPC client of any language would,
// with none of the SDK's logic (no leader hints, no retries).
package grpcstubs
