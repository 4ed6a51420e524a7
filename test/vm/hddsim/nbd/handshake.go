package nbd

import (
	"encoding/binary"
	"fmt"
	"io"
)

// handshake runs the fixed newstyle negotiation. It returns true when the
// client chose the export and the transmission phase begins.
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
	noZeroes := clientFlags&clientFlagNoZeroes != 0
	for {
		done, enter, err := c.option(noZeroes)
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
func (c *connection) option(noZeroes bool) (done, enter bool, err error) {
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
	case optExportName:
		if string(data) != c.export.Name {
			return true, false, fmt.Errorf("nbd: export %q requested: only %q exists", data, c.export.Name)
		}
		err := c.put(uint64(c.export.Size), c.transmitFlags())
		if err == nil && !noZeroes {
			_, err = c.w.Write(make([]byte, handshakeNZ))
		}
		return true, err == nil, err
	case optAbort:
		return true, false, c.optReply(opt, replyAck, nil)
	case optList:
		name := []byte(c.export.Name)
		payload := binary.BigEndian.AppendUint32(nil, uint32(len(name)))
		if err := c.optReply(opt, replyServer, append(payload, name...)); err != nil {
			return true, false, err
		}
		return false, false, c.optReply(opt, replyAck, nil)
	case optInfo, optGo:
		return c.infoOrGo(opt, data)
	default:
		// Structured replies, meta contexts, TLS and extended headers are
		// optional; refusing them keeps the client on simple replies.
		return false, false, c.optReply(opt, replyErrUnsup, nil)
	}
}

func (c *connection) infoOrGo(opt uint32, data []byte) (done, enter bool, err error) {
	name, ok := parseInfoRequest(data)
	if !ok {
		return false, false, c.optReply(opt, replyErrInvalid, nil)
	}
	if name != "" && name != c.export.Name {
		return false, false, c.optReply(opt, replyErrUnknown, nil)
	}
	info := binary.BigEndian.AppendUint16(nil, infoExport)
	info = binary.BigEndian.AppendUint64(info, uint64(c.export.Size))
	info = binary.BigEndian.AppendUint16(info, c.transmitFlags())
	if err := c.optReply(opt, replyInfo, info); err != nil {
		return true, false, err
	}
	sizes := binary.BigEndian.AppendUint16(nil, infoBlockSize)
	sizes = binary.BigEndian.AppendUint32(sizes, minBlock)
	sizes = binary.BigEndian.AppendUint32(sizes, prefBlock)
	sizes = binary.BigEndian.AppendUint32(sizes, maxPayload)
	if err := c.optReply(opt, replyInfo, sizes); err != nil {
		return true, false, err
	}
	if err := c.optReply(opt, replyAck, nil); err != nil {
		return true, false, err
	}
	return opt == optGo, opt == optGo, nil
}

// parseInfoRequest reads the export name from an NBD_OPT_INFO/GO payload:
// u32 name length, name, u16 count, count x u16 info types.
func parseInfoRequest(data []byte) (string, bool) {
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
