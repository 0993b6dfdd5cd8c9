#!/bin/sh
# Generates internal/grpcstubs: the gRPC-Go stubs of the API's services, for
# the tests that talk to a node with a plain gRPC client. Run by
# `make generate-api`, with protoc-gen-go-grpc on PATH.
#
# protoc-gen-go-grpc writes a service's stubs into the Go package of the
# file that declares it, and the schema declares messages and services in
# one file. So the schema is split in two, in a temporary directory: the
# messages (still of package api/cronoqv1) and the services, in a file of
# package internal/grpcstubs that imports them. The stubs then use the
# messages of api/cronoqv1, and no message type is generated twice.
set -eu

schema=api/proto/cronoq/v1/cronoq.proto
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/cronoq/v1"

awk '/^service /{skip=1} !skip{print} skip && /^}/{skip=0}' "$schema" >"$tmp/cronoq/v1/messages.proto"
{
	printf '%s\n\n' 'syntax = "proto3";'
	printf '%s\n\n' 'package cronoq.v1;'
	printf '%s\n\n' 'option go_package = "github.com/cronoq/cronoq/internal/grpcstubs;grpcstubs";'
	printf '%s\n\n' 'import "cronoq/v1/messages.proto";'
	awk '/^service /{on=1} on{print} on && /^}/{on=0; print ""}' "$schema"
} >"$tmp/cronoq/v1/services.proto"

protoc -I "$tmp" \
	--go-grpc_out=. --go-grpc_opt=module=github.com/cronoq/cronoq \
	"$tmp/cronoq/v1/services.proto"
