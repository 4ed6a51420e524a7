package nbd

import (
	"encoding/binary"
	"fmt"
	"io"
)

// handshake runs the fixed newstyle negotiation. It returns true when the
// client chose the export with NBD_OPT_GO and the transmission phase begins.
func (c *connection) handshake() (bool, error) {
	if err := c.put(magicInit, magicOpt, flagFixedNewstyle|flagNoZeroes); err != nil {
		return false, err
	}
	if err := c.w.Flush(); err != nil {
		return false, err
	}
	var clientFlags uint32
	if err := c.get(&clientFlags); err != nil {
		return false, fmt.Errorf("nbd: reading client flags: %w", err)
	}
	if clientFlags&clientFlagFixedNewstyle == 0 {
		return false, fmt.Errorf("nbd: client flags %#x: fixed newstyle is required", clientFlags)
	}
	for {
		done, enter, err := c.option()
		if err != nil {
			return false, err
		}
		if flushErr := c.w.Flush(); flushErr != nil {
			return false, flushErr
		}
		if done {
			return enter, nil
		}
	}
}

// option handles one client option. done ends the negotiation; enter says
// whether transmission follows.
func (c *connection) option() (done, enter bool, err error) {
	var magic uint64
	var opt, length uint32
	if err := c.get(&magic, &opt, &length); err != nil {
		return true, false, fmt.Errorf("nbd: reading option header: %w", err)
	}
	if magic != magicOpt {
		return true, false, fmt.Errorf("nbd: option magic %#x: want %#x", magic, magicOpt)
	}
	if length > maxOptionLength {
		return true, false, fmt.Errorf("nbd: option %d length %d: at most %d allowed", opt, length, maxOptionLength)
	}
	data := make([]byte, length)
	if _, err := io.ReadFull(c.r, data); err != nil {
		return true, false, fmt.Errorf("nbd: reading option %d data: %w", opt, err)
	}
	switch opt {
	case optGo:
		return c.optGo(data)
	case optAbort:
		return true, false, c.optReply(opt, replyAck, nil)
	default:
		// qemu asks for structured replies (and, if newer, extended
		// headers) before NBD_OPT_GO; refusing them keeps it on simple
		// replies and off block-status queries.
		return false, false, c.optReply(opt, replyErrUnsup, nil)
	}
}

// optGo answers NBD_OPT_GO with the export's size, flags and block sizes.
func (c *connection) optGo(data []byte) (done, enter bool, err error) {
	name, ok := parseGoRequest(data)
	if !ok {
		return false, false, c.optReply(optGo, replyErrInvalid, nil)
	}
	if name != "" && name != ExportName {
		return false, false, c.optReply(optGo, replyErrUnknown, nil)
	}
	info := binary.BigEndian.AppendUint16(nil, infoExport)
	info = binary.BigEndian.AppendUint64(info, uint64(c.export.Size))
	info = binary.BigEndian.AppendUint16(info, transmitFlags)
	sizes := binary.BigEndian.AppendUint16(nil, infoBlockSize)
	sizes = binary.BigEndian.AppendUint32(sizes, minBlock)
	sizes = binary.BigEndian.AppendUint32(sizes, prefBlock)
	sizes = binary.BigEndian.AppendUint32(sizes, maxPayload)
	for _, payload := range [][]byte{info, sizes} {
		if err := c.optReply(optGo, replyInfo, payload); err != nil {
			return true, false, err
		}
	}
	return true, true, c.optReply(optGo, replyAck, nil)
}

// parseGoRequest reads the export name from an NBD_OPT_GO payload:
// u32 name length, name, u16 count, count x u16 info types.
func parseGoRequest(data []byte) (string, bool) {
	if len(data) < 6 {
		return "", false
	}
	n := binary.BigEndian.Uint32(data)
	if uint64(len(data)) < 4+uint64(n)+2 {
		return "", false
	}
	name := string(data[4 : 4+n])
	count := binary.BigEndian.Uint16(data[4+n:])
	if len(data) != int(4+n+2+2*uint32(count)) {
		return "", false
	}
	return name, true
}

func (c *connection) optReply(opt, kind uint32, data []byte) error {
	if err := c.put(magicOptReply, opt, kind, uint32(len(data))); err != nil {
		return err
	}
	_, err := c.w.Write(data)
	return err
}
