package dm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Reads through the device-mapper control device. The monitor and the
// promoter read every device's table and status every second or two, and
// the promoter every cached volume's dm-stats reads twice a second; as a
// dmsetup process each read cost a fork, an exec and libdevmapper's set-up
// (a tenth of a second of CPU each under emulation, seven a second for an
// idle node), where the ioctl behind it costs microseconds. Table loads,
// suspends and resumes go through the control device too: a warm-up, a
// promotion and a resize each make several, and as dmsetup processes they
// were most of the fixed time a warm-up took beside its copy. So do dm-stats
// messages. Creating and removing devices still run dmsetup, which makes and
// removes their /dev/mapper nodes.

// Control issues one device-mapper ioctl: cmd with the struct dm_ioctl (and
// the data after it) in buf, which the kernel overwrites with its answer.
type Control interface {
	Ioctl(cmd uintptr, buf []byte) error
}

// ControlDevice is the kernel's device-mapper control device.
type ControlDevice struct{ Path string }

// NewControlDevice returns the control device at /dev/mapper/control.
func NewControlDevice() ControlDevice { return ControlDevice{Path: "/dev/mapper/control"} }

func (c ControlDevice) Ioctl(cmd uintptr, buf []byte) error {
	f, err := os.OpenFile(c.Path, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), cmd, uintptr(unsafe.Pointer(&buf[0])))
	if errno != 0 {
		return errno
	}
	return nil
}

// The kernel's struct dm_ioctl and struct dm_target_spec (include/uapi/
// linux/dm-ioctl.h, interface version 4) as golang.org/x/sys/unix declares
// them (DmIoctl, DmTargetSpec), with its commands and flags: the offsets of
// the fields used here, for reading and writing them in a byte buffer that
// carries the data after the struct.
const (
	ioctlHeaderSize = unix.SizeofDmIoctl
	// offData is offsetof(struct dm_ioctl, data): the data_size the kernel
	// leaves in an answer that carries no data, such as the table of a
	// device that has none live yet (between its creation and first resume).
	offData        = int(unsafe.Offsetof(unix.DmIoctl{}.Data))
	offDataSize    = int(unsafe.Offsetof(unix.DmIoctl{}.Data_size))
	offDataStart   = int(unsafe.Offsetof(unix.DmIoctl{}.Data_start))
	offTargetCount = int(unsafe.Offsetof(unix.DmIoctl{}.Target_count))
	offOpenCount   = int(unsafe.Offsetof(unix.DmIoctl{}.Open_count))
	offFlags       = int(unsafe.Offsetof(unix.DmIoctl{}.Flags))
	offDev         = int(unsafe.Offsetof(unix.DmIoctl{}.Dev))
	offName        = int(unsafe.Offsetof(unix.DmIoctl{}.Name))
	nameLen        = unix.DM_NAME_LEN

	cmdListDevices = unix.DM_LIST_DEVICES
	cmdDevSuspend  = unix.DM_DEV_SUSPEND
	cmdDevStatus   = unix.DM_DEV_STATUS
	cmdTableLoad   = unix.DM_TABLE_LOAD
	cmdTableClear  = unix.DM_TABLE_CLEAR
	cmdTableStatus = unix.DM_TABLE_STATUS
	cmdTargetMsg   = unix.DM_TARGET_MSG

	flagSuspend         = unix.DM_SUSPEND_FLAG
	flagStatusTable     = unix.DM_STATUS_TABLE_FLAG
	flagInactivePresent = unix.DM_INACTIVE_PRESENT_FLAG
	flagBufferFull      = unix.DM_BUFFER_FULL_FLAG
	flagSkipLockfs      = unix.DM_SKIP_LOCKFS_FLAG
	flagNoFlush         = unix.DM_NOFLUSH_FLAG
	flagDataOut         = unix.DM_DATA_OUT_FLAG

	// targetSpecHeaderSize is struct dm_target_spec, before its parameter string.
	targetSpecHeaderSize = unix.SizeofDmTargetSpec
	offSpecLength        = int(unsafe.Offsetof(unix.DmTargetSpec{}.Length))
	offSpecNext          = int(unsafe.Offsetof(unix.DmTargetSpec{}.Next))
	offSpecType          = int(unsafe.Offsetof(unix.DmTargetSpec{}.Target_type))
	typeLen              = unix.DM_MAX_TYPE_NAME
	// msgHeaderSize is struct dm_target_msg, before its text.
	msgHeaderSize = int(unsafe.Sizeof(unix.DmTargetMsg{}))

	// struct dm_name_list, which x/sys/unix does not declare: dev (u64),
	// next (u32), then the name.
	offNameListNext = 8
	offNameListName = 12

	firstBufferSize = 16 << 10
	maxBufferSize   = 16 << 20
)

// kernelIoctls answers the reads of Interface, and makes its table loads,
// suspends and resumes, with ioctls.
type kernelIoctls struct{ ctl Control }

// call runs command cmd (unix.DM_*) on device name ("" for none) with
// flags, growing the buffer while the kernel says its answer did not fit.
func (k kernelIoctls) call(cmd uintptr, name string, flags uint32) (dmReply, error) {
	return k.callWith(cmd, name, flags, nil, 0)
}

// callWith is call with payload (a struct the command reads, or targets
// target specs) at data_start.
func (k kernelIoctls) callWith(cmd uintptr, name string, flags uint32, payload []byte, targets uint32) (dmReply, error) {
	if len(name) >= nameLen {
		return nil, fmt.Errorf("device-mapper name %q: longer than %d bytes", name, nameLen-1)
	}
	if ioctlHeaderSize+len(payload) > maxBufferSize {
		return nil, fmt.Errorf("device-mapper ioctl %#x on %q: %d bytes of payload exceed %d", cmd, name, len(payload), maxBufferSize-ioctlHeaderSize)
	}
	first := max(firstBufferSize, align8(ioctlHeaderSize+len(payload)))
	for size := first; ; size = min(size*2, maxBufferSize) {
		buf := make([]byte, size)
		ne := binary.NativeEndian
		ne.PutUint32(buf[0:], unix.DM_VERSION_MAJOR) // version 4.0.0: any 4.x kernel answers
		ne.PutUint32(buf[offDataSize:], uint32(size))
		ne.PutUint32(buf[offDataStart:], ioctlHeaderSize)
		ne.PutUint32(buf[offFlags:], flags)
		ne.PutUint32(buf[offTargetCount:], targets)
		copy(buf[offName:], name)
		copy(buf[ioctlHeaderSize:], payload)
		if err := k.ctl.Ioctl(cmd, buf); err != nil {
			if errors.Is(err, unix.ENXIO) {
				return nil, fmt.Errorf("device-mapper device %s: %w", name, ErrNotFound)
			}
			return nil, fmt.Errorf("device-mapper ioctl %#x on %q: %w", cmd, name, err)
		}
		if reply := dmReply(buf); reply.flags()&flagBufferFull == 0 {
			return reply, nil
		}
		if size == maxBufferSize {
			return nil, fmt.Errorf("device-mapper ioctl %#x on %q: the answer exceeds %d bytes", cmd, name, maxBufferSize)
		}
	}
}

func align8(n int) int { return (n + 7) &^ 7 }

// suspend suspends name (on) or resumes it, which makes a loaded table
// live. A suspend waits for the I/O in flight but does not freeze a
// filesystem on the device (Interface.Suspend says why).
func (k kernelIoctls) suspend(ctx context.Context, name string, on bool) error {
	flags := uint32(0)
	if on {
		flags = flagSuspend | flagSkipLockfs
	}
	return k.suspendWith(ctx, name, flags)
}

// suspendNoFlush suspends name without freezing its filesystem and keeping
// I/O a target pushes back for the next table (Interface.SuspendNoFlush):
// the kernel's lock_fs, skipped so, waits where no signal reaches for
// writes that a dead cache device never completes.
func (k kernelIoctls) suspendNoFlush(ctx context.Context, name string) error {
	return k.suspendWith(ctx, name, flagSuspend|flagNoFlush|flagSkipLockfs)
}

func (k kernelIoctls) suspendWith(ctx context.Context, name string, flags uint32) error {
	return interruptible(ctx, func() error {
		_, err := k.call(cmdDevSuspend, name, flags)
		return err
	})
}

// load puts t into name's inactive slot: one struct dm_target_spec (start,
// length, status, next, target type) followed by its parameter string.
func (k kernelIoctls) load(ctx context.Context, name string, t Table) error {
	typ, params := t.Target.Type(), t.Target.Params()
	if len(typ) >= typeLen {
		return fmt.Errorf("device-mapper target type %q: longer than %d bytes", typ, typeLen-1)
	}
	spec := make([]byte, align8(targetSpecHeaderSize+len(params)+1))
	ne := binary.NativeEndian
	// sector_start and status stay 0.
	ne.PutUint64(spec[offSpecLength:], t.Length)
	ne.PutUint32(spec[offSpecNext:], uint32(len(spec)))
	copy(spec[offSpecType:offSpecType+typeLen], typ)
	copy(spec[targetSpecHeaderSize:], params)
	return interruptible(ctx, func() error {
		_, err := k.callWith(cmdTableLoad, name, 0, spec, 1)
		return err
	})
}

// clear drops name's inactive table, if it has one.
func (k kernelIoctls) clear(name string) error {
	_, err := k.call(cmdTableClear, name, 0)
	return err
}

// interruptible makes a table change that may wait on I/O (a suspend waits
// for the I/O in flight, a resume with a new table suspends first) end with
// ctx, as killing a dmsetup process did: the call runs on a locked OS
// thread, which is sent SIGURG once ctx ends, and the kernel undoes the
// suspend with EINTR. The Go runtime takes SIGURG for its own preemption
// and ignores it otherwise. EINTR from any other signal (a child's SIGCHLD)
// is tried again.
func interruptible(ctx context.Context, call func() error) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := onSignalledThread(ctx, call); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

const (
	// signalEvery repeats the signal, in case one came just before the call
	// entered the kernel, where the Go runtime took it and nothing waited.
	signalEvery = 10 * time.Millisecond
	// signalWindow bounds the signalling: a signal that reaches the thread
	// in the kernel stays pending there and interrupts the first
	// interruptible wait, so once the call has surely entered the kernel
	// more signals change nothing. A call still running after it waits
	// where no signal reaches (an uninterruptible wait, a dead disk), for
	// as long as it takes, and being signalled all that time would only
	// wake the thread a hundred times a second.
	signalWindow = time.Second
)

func onSignalledThread(ctx context.Context, call func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	stop := signalWhenDone(ctx, unix.Getpid(), unix.Gettid())
	defer stop() // before the thread is unlocked
	return call()
}

// signalWhenDone sends SIGURG to thread tid of pid once ctx ends, for
// signalWindow at most. stop ends the signalling and waits for its
// goroutine: once the thread is unlocked it runs other goroutines, whose
// system calls a late signal would interrupt (another volume's suspend).
func signalWhenDone(ctx context.Context, pid, tid int) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-done:
		case <-ctx.Done():
			signalUntil(done, pid, tid)
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

// signalUntil signals the thread every signalEvery until done closes or
// signalWindow has passed.
func signalUntil(done <-chan struct{}, pid, tid int) {
	every, window := time.NewTicker(signalEvery), time.NewTimer(signalWindow)
	defer every.Stop()
	defer window.Stop()
	for {
		_ = unix.Tgkill(pid, tid, unix.SIGURG)
		select {
		case <-done:
			return
		case <-window.C:
			return
		case <-every.C:
		}
	}
}

// message sends a message to sector 0 of device name, as `dmsetup message
// name 0 msg` does (a struct dm_target_msg: the sector, then the text), and
// returns the kernel's answer, "" when it gave none. The kernel writes the
// answer where the message was, as libdevmapper lays it out; an answer that
// did not fit is asked again with a larger buffer.
func (k kernelIoctls) message(name, msg string) (string, error) {
	payload := make([]byte, msgHeaderSize+len(msg)+1) // sector 0, the text, its NUL
	copy(payload[msgHeaderSize:], msg)
	reply, err := k.callWith(cmdTargetMsg, name, 0, payload, 0)
	if err != nil {
		return "", err
	}
	if reply.flags()&flagDataOut == 0 {
		return "", nil
	}
	data, err := reply.data()
	if err != nil {
		return "", err
	}
	return cString(data), nil
}

// dmReply is a struct dm_ioctl as the kernel filled it in, data included.
type dmReply []byte

func (r dmReply) u32(off int) uint32 { return binary.NativeEndian.Uint32(r[off:]) }
func (r dmReply) flags() uint32      { return r.u32(offFlags) }

// data is the answer's payload: from data_start to data_size.
func (r dmReply) data() ([]byte, error) {
	start, end := int(r.u32(offDataStart)), int(r.u32(offDataSize))
	if end == offData {
		return nil, nil
	}
	if start < ioctlHeaderSize || end > len(r) || start > end {
		return nil, fmt.Errorf("device-mapper answer: data from %d to %d in a %d-byte buffer", start, end, len(r))
	}
	return r[start:end], nil
}

func (r dmReply) device(name string) Device {
	dev := binary.NativeEndian.Uint64(r[offDev:])
	return Device{Name: name, DevNum: DevNum{Major: unix.Major(dev), Minor: unix.Minor(dev)},
		Suspended: r.flags()&flagSuspend != 0, InactiveTable: r.flags()&flagInactivePresent != 0,
		OpenCount: int(int32(r.u32(offOpenCount)))}
}

// cString is the NUL-terminated string at the start of b.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// names lists every device-mapper device (struct dm_name_list records,
// each giving the offset of the next).
func (k kernelIoctls) names() ([]string, error) {
	reply, err := k.call(cmdListDevices, "", 0)
	if err != nil {
		return nil, err
	}
	data, err := reply.data()
	if err != nil || len(data) < offNameListName || binary.NativeEndian.Uint64(data) == 0 {
		return nil, err // a zero dev in the first record: no devices
	}
	var names []string
	for off := 0; ; {
		if off+offNameListName > len(data) {
			return nil, fmt.Errorf("device-mapper device list: record at %d past its %d bytes", off, len(data))
		}
		names = append(names, cString(data[off+offNameListName:]))
		next := int(binary.NativeEndian.Uint32(data[off+offNameListNext:]))
		if next == 0 {
			return names, nil
		}
		off += next
	}
}

func (k kernelIoctls) info(name string) (Device, error) {
	reply, err := k.call(cmdDevStatus, name, 0)
	if err != nil {
		return Device{}, err
	}
	return reply.device(name), nil
}

func (k kernelIoctls) list() ([]Device, error) {
	names, err := k.names()
	if err != nil {
		return nil, err
	}
	devices := make([]Device, 0, len(names))
	for _, name := range names {
		d, err := k.info(name)
		if errors.Is(err, ErrNotFound) {
			continue // removed since the listing
		}
		if err != nil {
			return nil, err
		}
		devices = append(devices, d)
	}
	return devices, nil
}

// lines returns name's live table (table true) or status (--noflush), one
// "<start> <length> <type> <params>" line per target, as dmsetup prints them.
func (k kernelIoctls) lines(name string, table bool) ([]string, error) {
	flags := uint32(flagNoFlush)
	if table {
		flags = flagStatusTable
	}
	reply, err := k.call(cmdTableStatus, name, flags)
	if err != nil {
		return nil, err
	}
	data, err := reply.data()
	if err != nil {
		return nil, err
	}
	count := int(reply.u32(offTargetCount))
	lines := make([]string, 0, count)
	for i, off := 0, 0; i < count; i++ {
		if off+targetSpecHeaderSize > len(data) {
			return nil, fmt.Errorf("device-mapper table of %s: target %d at %d past its %d bytes", name, i, off, len(data))
		}
		spec := data[off:]
		start, length := binary.NativeEndian.Uint64(spec[0:]), binary.NativeEndian.Uint64(spec[offSpecLength:])
		line := fmt.Sprintf("%d %d %s %s", start, length, cString(spec[offSpecType:offSpecType+typeLen]), cString(spec[targetSpecHeaderSize:]))
		lines = append(lines, strings.TrimRight(line, " "))
		off = int(binary.NativeEndian.Uint32(spec[offSpecNext:])) // from the start of the data
	}
	return lines, nil
}

func (k kernelIoctls) states(keep func(name string) bool) (map[string]DeviceState, error) {
	names, err := k.names()
	if err != nil {
		return nil, err
	}
	tables, statuses := map[string][]string{}, map[string][]string{}
	for _, name := range names {
		if keep != nil && !keep(name) {
			continue
		}
		table, err := k.lines(name, true)
		var status []string
		if err == nil {
			status, err = k.lines(name, false)
		}
		if errors.Is(err, ErrNotFound) {
			continue // removed since the listing
		}
		if err != nil {
			return nil, err
		}
		tables[name], statuses[name] = table, status
	}
	return joinStates(tables, statuses)
}
