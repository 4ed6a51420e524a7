// Package nbd is a small Network Block Device server (fixed newstyle
// handshake, simple replies) that serves one export through a latency model.
// It exists so qemu can use a simulated hard disk as a block device backend.
package nbd

// Protocol constants from the NBD specification (doc/proto.md upstream).
const (
	magicInit        uint64 = 0x4e42444d41474943 // "NBDMAGIC"
	magicOpt         uint64 = 0x49484156454F5054 // "IHAVEOPT"
	magicOptReply    uint64 = 0x3e889045565a9
	magicRequest     uint32 = 0x25609513
	magicSimpleReply uint32 = 0x67446698

	flagFixedNewstyle uint16 = 1 << 0
	flagNoZeroes      uint16 = 1 << 1

	clientFlagFixedNewstyle uint32 = 1 << 0
	clientFlagNoZeroes      uint32 = 1 << 1

	optExportName       uint32 = 1
	optAbort            uint32 = 2
	optList             uint32 = 3
	optInfo             uint32 = 6
	optGo               uint32 = 7
	optStructuredReply  uint32 = 8
	replyAck            uint32 = 1
	replyServer         uint32 = 2
	replyInfo           uint32 = 3
	replyErrUnsup       uint32 = 1<<31 + 1
	replyErrInvalid     uint32 = 1<<31 + 3
	replyErrUnknown     uint32 = 1<<31 + 6
	infoExport          uint16 = 0
	infoBlockSize       uint16 = 3
	maxOptionLength            = 64 << 10
	transmitHasFlags    uint16 = 1 << 0
	transmitSendFlush   uint16 = 1 << 2
	transmitSendFUA     uint16 = 1 << 3
	transmitRotational  uint16 = 1 << 4
	transmitSendTrim    uint16 = 1 << 5
	transmitWriteZeroes uint16 = 1 << 6

	cmdRead        uint16 = 0
	cmdWrite       uint16 = 1
	cmdDisc        uint16 = 2
	cmdFlush       uint16 = 3
	cmdTrim        uint16 = 4
	cmdWriteZeroes uint16 = 6
	cmdFlagFUA     uint16 = 1 << 0
	cmdFlagNoHole  uint16 = 1 << 1

	errPerm     uint32 = 1
	errIO       uint32 = 5
	errInvalid  uint32 = 22
	errNoSpace  uint32 = 28
	errNotSup   uint32 = 95
	minBlock    uint32 = 1
	prefBlock   uint32 = 4096
	maxPayload  uint32 = 32 << 20
	handshakeNZ        = 124 // zero padding after NBD_OPT_EXPORT_NAME without NO_ZEROES
)
