package fsm

import (
	"bytes"

	"github.com/vmihailenco/msgpack/v5"
)

// encoder is the library's encoder with the options of the format: the
// reference the appenders of fastcodec.go are held to.
type encoder struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

func newEncoder() *encoder {
	e := new(encoder)
	e.enc = msgpack.NewEncoder(&e.buf)
	e.enc.UseCompactInts(true)
	return e
}

// encode returns prefix followed by the encoding of v, in the encoder's
// buffer: valid until the next call.
func (e *encoder) encode(prefix []byte, v any) ([]byte, error) {
	e.buf.Reset()
	e.buf.Write(prefix)
	if err := e.enc.Encode(v); err != nil {
		return nil, err
	}
	return e.buf.Bytes(), nil
}
