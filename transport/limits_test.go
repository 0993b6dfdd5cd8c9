package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/internal/testcluster"
	"github.com/cronoq/cronoq/transport"
)

// TestRequestBounds: a request over the size limit is refused with
// resource_exhausted, on unary calls and on worker streams alike, and so is
// an oversized header; the node goes on serving. The HTTP/2 settings
// advertise the stream and header bounds.
func TestRequestBounds(t *testing.T) {
	c := newTestCluster(t, 1, 1, time.Second)
	leader, _ := c.Leader()

	// A second API server on the node, with the smallest request limit:
	// two payloads of the engine's maximum plus room for the rest.
	ln, err := net.Listen("tcp", testcluster.NewAddrs().HTTP)
	require.NoError(t, err)
	srv, err := transport.New(transport.Config{
		Backend: leader.Node, Listener: ln, Logger: testcluster.Logger(t),
		MaxPayload: testMaxPayload, MaxOutput: testMaxOutput, MaxRequestBytes: 1,
	})
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, srv.Stop(ctx))
	})
	const limit = 2*testMaxPayload + 1<<20
	base := "http://" + srv.Addr()
	var h2 http.Protocols
	h2.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: &h2}}
	t.Cleanup(h2c.CloseIdleConnections)
	tasks := cronoqv1connect.NewTaskServiceClient(h2c, base)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Many specs, each within the payload limit, over the request limit.
	var specs []*cronoqv1.TaskSpec
	for range limit/testMaxPayload + 8 {
		specs = append(specs, &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{
			Pool: "bounds", Kind: "k", Payload: bytes.Repeat([]byte("x"), testMaxPayload-64),
		}})
	}
	require.Greater(t, proto.Size(&cronoqv1.EnqueueManyRequest{Specs: specs}), limit)
	_, err = tasks.EnqueueMany(ctx, connect.NewRequest(&cronoqv1.EnqueueManyRequest{Specs: specs}))
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "oversized request: %v", err)
	counts, err := tasks.Counts(ctx, connect.NewRequest(&cronoqv1.CountsRequest{}))
	require.NoError(t, err)
	require.Empty(t, counts.Msg.GetPools(), "nothing of the refused request was submitted")

	// Within the limit, the same call goes through.
	res, err := tasks.EnqueueMany(ctx, connect.NewRequest(&cronoqv1.EnqueueManyRequest{Specs: specs[:8]}))
	require.NoError(t, err)
	require.Len(t, res.Msg.GetResults(), 8)

	// A worker stream message over its limit (two outputs plus room).
	const workerLimit = 2*testMaxOutput + 1<<20
	msg := make([]byte, 5, 5+workerLimit+1)
	binary.BigEndian.PutUint32(msg[1:], workerLimit+1)
	msg = append(msg, bytes.Repeat([]byte{0}, workerLimit+1)...)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+cronoqv1connect.WorkerServiceConnectProcedure, bytes.NewReader(msg))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/connect+proto")
	resp, err := h2c.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), `"code":"resource_exhausted"`)

	// A header over the limit (HTTP/1.1): 431, the connection closed.
	conn, err := net.Dial("tcp", srv.Addr())
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 128<<10)+"\r\n\r\n")
	require.NoError(t, err)
	hresp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	hresp.Body.Close()
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, hresp.StatusCode)

	// The HTTP/2 settings the server announces.
	settings := h2Settings(t, srv.Addr())
	require.Equal(t, uint32(250), settings[0x3], "SETTINGS_MAX_CONCURRENT_STREAMS")
	require.Less(t, settings[0x6], uint32(1<<20), "SETTINGS_MAX_HEADER_LIST_SIZE")
	require.GreaterOrEqual(t, settings[0x6], uint32(64<<10), "SETTINGS_MAX_HEADER_LIST_SIZE")

	// The node still serves.
	hr, err := http.Get(base + "/v1/health")
	require.NoError(t, err)
	hr.Body.Close()
	require.Equal(t, http.StatusOK, hr.StatusCode)
	_, err = tasks.Submit(ctx, connect.NewRequest(&cronoqv1.SubmitRequest{Spec: specs[0]}))
	require.NoError(t, err)
}

// h2Settings opens an HTTP/2 (h2c, prior knowledge) connection to addr and
// returns the settings of the server's first SETTINGS frame, by id.
func h2Settings(t *testing.T, addr string) map[uint16]uint32 {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	// The client preface and an empty SETTINGS frame.
	_, err = io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
	require.NoError(t, err)
	r := bufio.NewReader(conn)
	for {
		var head [9]byte
		_, err := io.ReadFull(r, head[:])
		require.NoError(t, err)
		n := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
		payload := make([]byte, n)
		_, err = io.ReadFull(r, payload)
		require.NoError(t, err)
		if head[3] != 0x4 || head[4]&0x1 != 0 { // not SETTINGS, or an ack
			continue
		}
		out := map[uint16]uint32{}
		for i := 0; i+6 <= len(payload); i += 6 {
			out[binary.BigEndian.Uint16(payload[i:])] = binary.BigEndian.Uint32(payload[i+2:])
		}
		return out
	}
}
