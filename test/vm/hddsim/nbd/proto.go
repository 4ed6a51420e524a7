// Package nbd is a small Network Block Device server (fixed newstyle
// handshake, simple replies) that serves one export through a latency model.
// It exists so qemu can use a simulated hard disk as a block device backend,
// and speaks only what qemu's NBD client (block/nbd.c) sends it.
package nbd

// Protocol constants from the NBD specification (doc/proto.md upstream).
const (
	magicInit        uint64 = 0x4e42444d41474943 // "NBDMAGIC"
	magicOpt         uint64 = 0x49484156454F5054 // "IHAVEOPT"
	magicOptReply    uint64 = 0x3e889045565a9
	magicRequest     uint32 = 0x25609513
	magicSimpleReply uint32 = 0x67446698

	flagFixedNewstyle       uint16 = 1 << 0
	flagNoZeroes            uint16 = 1 << 1
	clientFlagFixedNewstyle uint32 = 1 << 0

	optAbort        uint32 = 2
	optGo           uint32 = 7
	replyAck        uint32 = 1
	replyInfo       uint32 = 3
	replyErrUnsup   uint32 = 1<<31 + 1
	replyErrInvalid uint32 = 1<<31 + 3
	replyErrUnknown uint32 = 1<<31 + 6
	infoExport      uint16 = 0
	infoBlockSize   uint16 = 3
	maxOptionLength        = 64 << 10

	transmitHasFlags    uint16 = 1 << 0
	transmitSendFlush   uint16 = 1 << 2
	transmitSendFUA     uint16 = 1 << 3
	transmitRotational  uint16 = 1 << 4
	transmitWriteZeroes uint16 = 1 << 6
	// transmitFlags offers what qemu's client uses. No trim: the -blockdev
	// leaves discard at its default, ignore, so qemu would never send one.
	transmitFlags = transmitHasFlags | transmitSendFlush | transmitSendFUA | transmitRotational | transmitWriteZeroes

	cmdRead        uint16 = 0
	cmdWrite       uint16 = 1
	cmdDisc        uint16 = 2
	cmdFlush       uint16 = 3
	cmdWriteZeroes uint16 = 6
	cmdFlagFUA     uint16 = 1 << 0

	errIO      uint32 = 5
	errInvalid uint32 = 22
	errNoSpace uint32 = 28
	minBlock   uint32 = 1
	prefBlock  uint32 = 4096
	maxPayload uint32 = 32 << 20
)
