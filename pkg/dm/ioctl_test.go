package dm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The fields named here are the ones of include/uapi/linux/dm-ioctl.h at
// the kernel's offsets (pahole's), and the commands its numbers (strace's):
// a constant taken from the wrong x/sys/unix field or command fails here.
func TestIoctlLayoutIsTheKernels(t *testing.T) {
	for name, c := range map[string]struct{ got, want int }{
		"sizeof(struct dm_ioctl)": {ioctlHeaderSize, 312}, "data_size": {offDataSize, 12}, "data_start": {offDataStart, 16},
		"target_count": {offTargetCount, 20}, "open_count": {offOpenCount, 24}, "flags": {offFlags, 28}, "dev": {offDev, 40},
		"name": {offName, 48}, "data": {offData, 305}, "DM_NAME_LEN": {nameLen, 128},
		"sizeof(struct dm_target_spec)": {targetSpecHeaderSize, 40}, "length": {offSpecLength, 8}, "next": {offSpecNext, 20},
		"target_type": {offSpecType, 24}, "DM_MAX_TYPE_NAME": {typeLen, 16}, "sizeof(struct dm_target_msg)": {msgHeaderSize, 8},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", name, c.got, c.want)
		}
	}
	for name, c := range map[string]struct{ got, want uintptr }{
		"DM_LIST_DEVICES": {cmdListDevices, 0xc138fd02}, "DM_DEV_SUSPEND": {cmdDevSuspend, 0xc138fd06},
		"DM_DEV_STATUS": {cmdDevStatus, 0xc138fd07}, "DM_TABLE_LOAD": {cmdTableLoad, 0xc138fd09},
		"DM_TABLE_STATUS": {cmdTableStatus, 0xc138fd0c}, "DM_TARGET_MSG": {cmdTargetMsg, 0xc138fd0e},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", name, c.got, c.want)
		}
	}
}

// fakeKernel answers device-mapper ioctls the way drivers/md/dm-ioctl.c
// lays its answers out: a list of struct dm_name_list records whose next is
// relative to the record, target specs whose next counts from the start of
// the data, 8-byte alignment, and DM_BUFFER_FULL_FLAG when the buffer is short.
type fakeKernel struct {
	devices map[string]fakeDevice
	calls   int
	// largest is the largest buffer an ioctl came with.
	largest int
	// answers are the answers to messages, by device and message text;
	// messages records every message as "<device> <sector> <text>".
	answers  map[string]map[string]string
	messages []string
	// interrupted is how many suspends and loads are to fail with EINTR, as
	// when a signal reaches the thread waiting in the kernel.
	interrupted int
	// loads are the buffers of the table loads, from data_start.
	loads [][]byte
	// suspends are the flags each DM_DEV_SUSPEND came with.
	suspends []uint32
}

type fakeDevice struct {
	major, minor      uint32
	suspended, loaded bool
	open              int32
	table, status     []string // "<start> <length> <type> <params>"
	// inactive is the loaded table, which a resume makes live.
	inactive []string
}

func (k *fakeKernel) Ioctl(cmd uintptr, buf []byte) error {
	k.calls++
	ne := binary.NativeEndian
	start, size := int(ne.Uint32(buf[offDataStart:])), int(ne.Uint32(buf[offDataSize:]))
	k.largest = max(k.largest, size)
	flags := ne.Uint32(buf[offFlags:])
	asked := flags // before the device's state is written into flags
	name := cString(buf[offName : offName+nameLen])
	out, room := buf[start:size], size-start
	full := func() error { ne.PutUint32(buf[offFlags:], flags|flagBufferFull); return nil }
	if cmd == cmdListDevices {
		names := make([]string, 0, len(k.devices))
		for n := range k.devices {
			names = append(names, n)
		}
		sort.Strings(names)
		off, prev := 0, -1
		for _, n := range names {
			next := align8(off + 12 + len(n) + 1)
			if next > room {
				return full()
			}
			d := k.devices[n]
			ne.PutUint64(out[off:], unix.Mkdev(d.major, d.minor))
			copy(out[off+12:], n+"\x00")
			if prev >= 0 {
				ne.PutUint32(out[prev+8:], uint32(off-prev))
			}
			prev, off = off, next
		}
		ne.PutUint32(buf[offDataSize:], uint32(start+off))
		return nil
	}
	d, ok := k.devices[name]
	if !ok {
		return unix.ENXIO
	}
	ne.PutUint64(buf[offDev:], unix.Mkdev(d.major, d.minor))
	ne.PutUint32(buf[offOpenCount:], uint32(d.open))
	flags &^= flagSuspend | flagInactivePresent
	if d.suspended {
		flags |= flagSuspend
	}
	if d.loaded {
		flags |= flagInactivePresent
	}
	ne.PutUint32(buf[offFlags:], flags)
	if (cmd == cmdDevSuspend || cmd == cmdTableLoad) && k.interrupted > 0 {
		k.interrupted--
		return unix.EINTR
	}
	switch cmd {
	case cmdTargetMsg:
		return k.message(buf, name, start, size, flags)
	case cmdTableLoad:
		return k.load(buf, name, start, size)
	case cmdTableClear:
		d.inactive, d.loaded = nil, false
		k.devices[name] = d
		return nil
	case cmdDevSuspend:
		k.suspends = append(k.suspends, asked)
		k.suspendOrResume(name, asked&flagSuspend != 0)
		return nil
	}
	if cmd != cmdTableStatus {
		return nil
	}
	lines := d.status
	if flags&flagStatusTable != 0 {
		lines = d.table
	}
	if lines == nil { // no live table: the kernel writes no data
		ne.PutUint32(buf[offDataSize:], uint32(offData))
		return nil
	}
	off := 0
	for _, line := range lines {
		f := append(strings.SplitN(line, " ", 4), "") // no parameters: f[3] is ""
		next := align8(off + targetSpecHeaderSize + len(f[3]) + 1)
		if next > room {
			return full()
		}
		var s, l uint64
		for i, p := range []*uint64{&s, &l} {
			for _, c := range f[i] {
				*p = *p*10 + uint64(c-'0')
			}
		}
		ne.PutUint64(out[off:], s)
		ne.PutUint64(out[off+8:], l)
		copy(out[off+24:off+40], f[2])
		copy(out[off+targetSpecHeaderSize:], f[3]+"\x00")
		ne.PutUint32(out[off+20:], uint32(next))
		off = next
	}
	ne.PutUint32(buf[offTargetCount:], uint32(len(lines)))
	ne.PutUint32(buf[offDataSize:], uint32(start+off))
	return nil
}

// load reads the target specs as populate_table() does: the first at
// data_start, each next one next bytes after the one before, each
// parameter string NUL-terminated within the buffer.
func (k *fakeKernel) load(buf []byte, name string, start, size int) error {
	ne := binary.NativeEndian
	k.loads = append(k.loads, bytes.Clone(buf[start:size]))
	var lines []string
	for i, off := 0, start; i < int(ne.Uint32(buf[offTargetCount:])); i++ {
		nul := -1
		if off+targetSpecHeaderSize <= size {
			nul = bytes.IndexByte(buf[off+targetSpecHeaderSize:size], 0)
		}
		spec := buf[off:]
		// next leads to the following spec: 8-byte aligned, past this one's NUL.
		if next := int(ne.Uint32(spec[20:])); nul < 0 || next%8 != 0 || next <= targetSpecHeaderSize+nul {
			return unix.EINVAL
		}
		lines = append(lines, strings.TrimRight(fmt.Sprintf("%d %d %s %s", ne.Uint64(spec), ne.Uint64(spec[8:]), cString(spec[24:40]), cString(spec[targetSpecHeaderSize:])), " "))
		off += int(ne.Uint32(spec[20:]))
	}
	if len(lines) == 0 {
		return unix.EINVAL
	}
	d := k.devices[name]
	d.inactive, d.loaded = lines, true
	k.devices[name] = d
	return nil
}

// suspendOrResume is do_suspend() or do_resume(): a resume swaps in a loaded table.
func (k *fakeKernel) suspendOrResume(name string, suspend bool) {
	d := k.devices[name]
	switch {
	case suspend:
		d.suspended = true
	case d.loaded:
		d.table, d.status, d.inactive, d.loaded, d.suspended = d.inactive, nil, nil, false, false
	default:
		d.suspended = false
	}
	k.devices[name] = d
}

// message answers as target_message() does: the struct dm_target_msg at
// data_start, the answer written from data_start with DM_DATA_OUT_FLAG, or
// DM_BUFFER_FULL_FLAG (and no clearing) when it does not fit.
func (k *fakeKernel) message(buf []byte, name string, start, size int, flags uint32) error {
	ne := binary.NativeEndian
	text := cString(buf[start+8 : size])
	k.messages = append(k.messages, fmt.Sprintf("%s %d %s", name, ne.Uint64(buf[start:]), text))
	answer, ok := k.answers[name][text]
	if !ok {
		return unix.EINVAL
	}
	if answer == "" {
		return nil
	}
	if len(answer)+1 > size-start {
		ne.PutUint32(buf[offFlags:], flags|flagBufferFull)
		return nil
	}
	copy(buf[start:], answer+"\x00")
	ne.PutUint32(buf[offFlags:], flags|flagDataOut)
	ne.PutUint32(buf[offDataSize:], uint32(start+len(answer)+1))
	return nil
}

func kernelDevices() *fakeKernel {
	cacheTable := "0 524288 cache 254:4 254:5 254:2 128 2 writethrough metadata2 smq 0"
	cacheStatus := "0 524288 cache 8 14/2048 128 89/1024 142 82 12 244 0 89 0 2 metadata2 writethrough 2 migration_threshold 2048 smq 0 rw -"
	return &fakeKernel{devices: map[string]fakeDevice{
		"ssdcache-pvc-1":     {major: 254, minor: 3, open: 1, table: []string{cacheTable}, status: []string{cacheStatus}},
		"ssdcache--hdd-pvc1": {major: 254, minor: 2, open: 1, table: []string{"0 524288 linear 8:0 2048"}, status: []string{"0 524288 linear"}},
		"ssdcache-pvc-2":     {major: 254, minor: 6, suspended: true, loaded: true, table: []string{"0 1024 linear 8:0 4096"}, status: []string{"0 1024 linear"}},
		"two-targets":        {major: 254, minor: 9, table: []string{"0 8 zero", "8 8 error"}, status: []string{"0 8 zero", "8 8 error"}},
	}}
}

func TestKernelReadsListDevicesAndTheirStates(t *testing.T) {
	k := kernelDevices()
	d := NewDmsetup(nil).ReadingFrom(k)
	ctx := context.Background()
	devs, err := d.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []Device{
		{Name: "ssdcache--hdd-pvc1", DevNum: DevNum{254, 2}, OpenCount: 1},
		{Name: "ssdcache-pvc-1", DevNum: DevNum{254, 3}, OpenCount: 1},
		{Name: "ssdcache-pvc-2", DevNum: DevNum{254, 6}, Suspended: true, InactiveTable: true},
		{Name: "two-targets", DevNum: DevNum{254, 9}},
	}
	if !reflect.DeepEqual(devs, want) {
		t.Fatalf("List = %+v\nwant %+v", devs, want)
	}
	states, err := d.States(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 3 || states["two-targets"].Status != "" {
		t.Fatalf("States has %d devices, want the 3 with one target: %v", len(states), states)
	}
	// The devices keep leaves out are listed, not read: one listing, then a
	// table and a status read for the one kept.
	calls := k.calls
	kept, err := d.States(ctx, func(name string) bool { return name == "ssdcache-pvc-1" })
	if err != nil || len(kept) != 1 || kept["ssdcache-pvc-1"].Status != states["ssdcache-pvc-1"].Status {
		t.Fatalf("States of ssdcache-pvc-1 alone: %v (%v)", kept, err)
	}
	if n := k.calls - calls; n != 3 {
		t.Errorf("States of one device of %d made %d ioctls, want 3 (list, table, status)", len(devs), n)
	}
	st, err := ParseCacheStatus(states["ssdcache-pvc-1"].Status)
	if err != nil || st.ReadHits != 142 || st.CacheUsed != 89 {
		t.Fatalf("cache status %+v (%v)", st, err)
	}
	if tbl := states["ssdcache-pvc-1"].Table.String(); tbl != k.devices["ssdcache-pvc-1"].table[0] {
		t.Fatalf("table %q, want %q", tbl, k.devices["ssdcache-pvc-1"].table[0])
	}
	if s, err := d.Status(ctx, "two-targets"); err != nil || s != "0 8 zero\n8 8 error" {
		t.Fatalf("Status of a two-target device %q (%v), want both lines as dmsetup prints them", s, err)
	}
}

// A device without a live table (LVM creates, loads and resumes in three
// steps) answers with no data; it is listed, and States leaves it out
// instead of failing for every device.
func TestKernelReadsADeviceWithoutATable(t *testing.T) {
	k := kernelDevices()
	k.devices["vg-being--created"] = fakeDevice{major: 254, minor: 11}
	d := NewDmsetup(nil).ReadingFrom(k)
	states, err := d.States(context.Background(), nil)
	if err != nil || len(states) != 3 {
		t.Fatalf("States with a device without a table: %d devices (%v), want the 3 with one target", len(states), err)
	}
	if out, err := d.read(context.Background(), "vg-being--created", true); err != nil || out != "" {
		t.Fatalf("table of a device without one: %q (%v), want none", out, err)
	}
}

func TestKernelReadsSayNotFound(t *testing.T) {
	d := NewDmsetup(nil).ReadingFrom(kernelDevices())
	if _, err := d.Table(context.Background(), "ssdcache-gone"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Table of a missing device: %v, want ErrNotFound", err)
	}
	if _, err := d.Info(context.Background(), "ssdcache-gone"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Info of a missing device: %v, want ErrNotFound", err)
	}
	empty := NewDmsetup(nil).ReadingFrom(&fakeKernel{devices: map[string]fakeDevice{}})
	if devs, err := empty.List(context.Background()); err != nil || len(devs) != 0 {
		t.Fatalf("List with no devices: %v %v", devs, err)
	}
}

// An answer larger than the first buffer (a long table, many devices) is
// asked for again with a larger one.
func TestKernelReadsGrowTheBuffer(t *testing.T) {
	k := kernelDevices()
	long := "0 8 linear 8:0 0"
	var lines []string
	for i := 0; i < 1000; i++ { // about 40 KiB of target specs
		lines = append(lines, long)
	}
	k.devices["striped"] = fakeDevice{major: 254, minor: 10, table: lines, status: lines}
	for i := 0; i < 2000; i++ { // about 64 KiB of names
		k.devices["ssdcache-pvc-"+strings.Repeat("x", 20)+string(rune('a'+i%26))+strings.Repeat("y", i%7)+"-"+strconv.Itoa(i)] = fakeDevice{major: 254, minor: uint32(100 + i)}
	}
	d := NewDmsetup(nil).ReadingFrom(k)
	out, err := d.read(context.Background(), "striped", true)
	if err != nil || strings.Count(out, "\n") != 999 {
		t.Fatalf("long table: %d lines (%v)", strings.Count(out, "\n")+1, err)
	}
	devs, err := d.List(context.Background())
	if err != nil || len(devs) != len(k.devices) {
		t.Fatalf("List of %d devices: %d (%v)", len(k.devices), len(devs), err)
	}
}

// writesAnswer is "@stats_print" of 600 areas of 128 sectors, every third
// written, with counters of digits digits: an answer of 24 KiB (1 digit) or
// 57 KiB (19).
func writesAnswer(digits int) (string, []uint64) {
	var print strings.Builder
	var want []uint64
	ms := strings.Repeat("9", digits)
	for i := uint64(0); i < 600; i++ {
		writes := uint64(0)
		if i%3 == 0 {
			writes, want = 2, append(want, i)
		}
		fmt.Fprintf(&print, "%d+128 0 0 0 %s %d 0 %d 0 0 %s %s 0 0\n", i*128, ms, writes, writes*8, ms, ms)
	}
	return print.String(), want
}

func TestKernelMessagesReadWrittenAreas(t *testing.T) {
	for _, digits := range []int{1, 19} { // answers of 24 and 57 KiB: larger than the first buffer
		k := kernelDevices()
		print, want := writesAnswer(digits)
		k.answers = map[string]map[string]string{"ssdcache-pvc-1": {"@stats_print 3": print}}
		d := NewDmsetup(nil).ReadingFrom(k)
		areas, err := d.WrittenAreas(context.Background(), "ssdcache-pvc-1", 3)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(areas, want) {
			t.Fatalf("written areas %v, want %v", areas, want)
		}
		for _, m := range k.messages {
			if m != "ssdcache-pvc-1 0 @stats_print 3" {
				t.Fatalf("message %q, want only @stats_print 3 to sector 0", m)
			}
		}
	}
}

// The buffer grows up to maxBufferSize exactly, and no further; a payload that no buffer holds is
// refused before any ioctl.
func TestKernelMessageBufferLimits(t *testing.T) {
	k := kernelDevices()
	huge := strings.Repeat("0+128 1 0 8 0 0 0 0 0 0 0 0 0 0\n", maxBufferSize/32+1)
	k.answers = map[string]map[string]string{"ssdcache-pvc-1": {"@stats_print 0": huge}}
	d := NewDmsetup(nil).ReadingFrom(k)
	_, err := d.message(context.Background(), "ssdcache-pvc-1", "@stats_print 0")
	if err == nil || !strings.Contains(err.Error(), "exceeds") || k.largest != maxBufferSize {
		t.Fatalf("answer of %d bytes: %v, largest buffer %d; want an error after a buffer of %d", len(huge), err, k.largest, maxBufferSize)
	}
	calls := k.calls
	if _, err := d.message(context.Background(), "ssdcache-pvc-1", strings.Repeat("x", maxBufferSize)); err == nil || k.calls != calls {
		t.Fatalf("a message larger than any buffer: %v after %d ioctls, want an error and none", err, k.calls-calls)
	}
}

func TestKernelMessageErrors(t *testing.T) {
	k := kernelDevices()
	d := NewDmsetup(nil).ReadingFrom(k)
	_, err := d.TrackWrites(context.Background(), "gone", 8)
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("message to a missing device: %v, want ErrNotFound", err)
	}
	_, err = d.message(context.Background(), "ssdcache-pvc-1", "@stats_bogus")
	if err == nil || !strings.Contains(err.Error(), `message "@stats_bogus" to ssdcache-pvc-1`) {
		t.Errorf("refused message: %v, want an error naming it and the device", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.message(ctx, "ssdcache-pvc-1", "@stats_list"); !errors.Is(err, context.Canceled) {
		t.Errorf("message after the context ended: %v", err)
	}
}

// TestKernelLoadsSuspendsAndResumes: a table loaded through the control
// device is the one the kernel reads back once resumed, parameters and all,
// and suspend and resume set and clear the device's suspended state, with
// no dmsetup process.
func TestKernelLoadsSuspendsAndResumes(t *testing.T) {
	k := kernelDevices()
	d := NewDmsetup(nil).ReadingFrom(k)
	ctx := context.Background()
	want := Table{Length: 524288, Target: CacheTarget{Metadata: DevNum{254, 4}, Data: DevNum{254, 5}, Origin: DevNum{254, 2},
		BlockSectors: 128, Mode: Writethrough, Policy: "smq", ExtraFeatures: []string{"metadata2"}}}
	if err := d.Suspend(ctx, "ssdcache-pvc-1"); err != nil {
		t.Fatal(err)
	}
	if info, err := d.Info(ctx, "ssdcache-pvc-1"); err != nil || !info.Suspended {
		t.Fatalf("after Suspend: %+v, %v; want suspended", info, err)
	}
	if err := d.Load(ctx, "ssdcache-pvc-1", want); err != nil {
		t.Fatal(err)
	}
	if info, _ := d.Info(ctx, "ssdcache-pvc-1"); !info.InactiveTable {
		t.Fatal("after Load: no inactive table")
	}
	if err := d.Resume(ctx, "ssdcache-pvc-1"); err != nil {
		t.Fatal(err)
	}
	got, err := d.Table(ctx, "ssdcache-pvc-1")
	if err != nil || !got.Equal(want) {
		t.Fatalf("live table %v (%v), want %v", got, err, want)
	}
	if info, _ := d.Info(ctx, "ssdcache-pvc-1"); info.Suspended || info.InactiveTable {
		t.Errorf("after Resume: %+v, want live and nothing loaded", info)
	}
	linear := Table{Length: 8, Target: LinearTarget{Device: DevNum{8, 0}, Offset: 2048}}
	if err := d.Load(ctx, "two-targets", linear); err != nil {
		t.Fatal(err)
	}
	if err := d.Resume(ctx, "two-targets"); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.Table(ctx, "two-targets"); !got.Equal(linear) {
		t.Errorf("a parameter string of %d bytes: table %v, want %v", len(linear.Target.Params()), got, linear)
	}
	if err := d.Load(ctx, "gone", linear); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load on a missing device: %v, want ErrNotFound", err)
	}
	if err := d.Suspend(ctx, "gone"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Suspend on a missing device: %v, want ErrNotFound", err)
	}
}

// TestKernelLoadLaysOutTheTargetSpec checks the bytes of a load against
// struct dm_target_spec written out by hand: sector_start and length (u64),
// status (s32), next (u32), target_type (char[16]), then the parameters,
// NUL-terminated and padded to 8 bytes.
func TestKernelLoadLaysOutTheTargetSpec(t *testing.T) {
	k := kernelDevices()
	table := Table{Length: 1024, Target: LinearTarget{Device: DevNum{8, 0}, Offset: 4096}}
	if err := NewDmsetup(nil).ReadingFrom(k).Load(context.Background(), "ssdcache-pvc-2", table); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 56) // 40 + len("8:0 4096") + NUL = 49, padded to 56
	binary.LittleEndian.PutUint64(want[8:], 1024)
	binary.LittleEndian.PutUint32(want[20:], 56)
	copy(want[24:], "linear")
	copy(want[40:], "8:0 4096")
	if got := k.loads[0][:56]; !bytes.Equal(got, want) {
		t.Errorf("target spec\n got %x\nwant %x", got, want)
	}
}

// TestKernelSuspendEndsWithItsContext: EINTR from a stray signal is tried
// again; a context that ended stops the retries, and interrupts a call that
// waits in the kernel (here a poll that only a signal ends).
func TestKernelSuspendEndsWithItsContext(t *testing.T) {
	k := kernelDevices()
	k.interrupted = 2
	d := NewDmsetup(nil).ReadingFrom(k)
	calls := k.calls
	if err := d.Suspend(context.Background(), "ssdcache-pvc-1"); err != nil || k.calls-calls != 3 {
		t.Errorf("after two EINTRs: %v in %d calls, want success on the third", err, k.calls-calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls = k.calls
	if err := d.Resume(ctx, "ssdcache-pvc-1"); !errors.Is(err, context.Canceled) || k.calls != calls {
		t.Errorf("with an ended context: %v after %d calls, want context.Canceled and none", err, k.calls-calls)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := interruptible(ctx, func() error {
		_, err := unix.Poll(nil, -1)
		return err
	})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Errorf("a call waiting in the kernel: %v after %v, want the deadline's error soon after 50ms", err, time.Since(start))
	}
}

// hungControl is a control device whose ioctls wait, deaf to signals, until
// release closes: a suspend stuck in an uninterruptible wait in the kernel
// (a freeze of a filesystem on a dead disk).
type hungControl struct{ entered, release chan struct{} }

func (h hungControl) Ioctl(uintptr, []byte) error {
	close(h.entered) // one call: the test makes one
	<-h.release
	return nil
}

// TestKernelHungSuspendIsNotSignalledForever: once its context ends, a
// suspend that signals do not interrupt is signalled for signalWindow, not
// for as long as it hangs; the goroutine that signals it is gone well
// before the suspend returns, and nothing is left once it does.
func TestKernelHungSuspendIsNotSignalledForever(t *testing.T) {
	h := hungControl{entered: make(chan struct{}), release: make(chan struct{})}
	d := NewDmsetup(nil).ReadingFrom(h)
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan error, 1)
	go func() { returned <- d.Suspend(ctx, "ssdcache-pvc-1") }()
	<-h.entered
	cancel()
	// The goroutine of the suspend waits in the "kernel"; no other may stay.
	waitForGoroutines(t, before+1, signalWindow+5*time.Second, "a hung suspend whose context ended")
	close(h.release)
	if err := <-returned; err != nil {
		t.Errorf("the suspend, released: %v, want its success (the kernel suspended the device)", err)
	}
	waitForGoroutines(t, before, 5*time.Second, "after the suspend returned")
}

// waitForGoroutines fails t unless the process's goroutines fall to want
// within limit.
func waitForGoroutines(t *testing.T, want int, limit time.Duration, when string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%s: %d goroutines after %v, want %d:\n%s", when, runtime.NumGoroutine(), limit, want, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// No suspend freezes the filesystem (DM_SKIP_LOCKFS_FLAG, as dmsetup
// suspend --nolockfs); a drop's also keeps pushed-back I/O
// (DM_NOFLUSH_FLAG, --noflush), where every other waits for it.
func TestNoSuspendFreezesTheFilesystem(t *testing.T) {
	k := kernelDevices()
	d := NewDmsetup(nil).ReadingFrom(k)
	ctx := context.Background()
	if err := d.SuspendNoFlush(ctx, "ssdcache-pvc-1"); err != nil {
		t.Fatal(err)
	}
	if info, err := d.Info(ctx, "ssdcache-pvc-1"); err != nil || !info.Suspended {
		t.Fatalf("after SuspendNoFlush: %+v, %v; want suspended", info, err)
	}
	if err := d.Resume(ctx, "ssdcache-pvc-1"); err != nil {
		t.Fatal(err)
	}
	if err := d.Suspend(ctx, "ssdcache-pvc-1"); err != nil {
		t.Fatal(err)
	}
	want := []uint32{flagSuspend | flagNoFlush | flagSkipLockfs, 0, flagSuspend | flagSkipLockfs}
	if !slices.Equal(k.suspends, want) {
		t.Fatalf("suspend flags %#x, want %#x", k.suspends, want)
	}
}

// ClearInactive drops a loaded table through the control device, leaving
// the live one.
func TestClearInactiveDropsTheLoadedTable(t *testing.T) {
	k := kernelDevices()
	d := NewDmsetup(nil).ReadingFrom(k)
	ctx := context.Background()
	before, err := d.Table(ctx, "ssdcache-pvc-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Load(ctx, "ssdcache-pvc-1", Table{Length: 524288, Target: LinearTarget{Device: DevNum{Major: 254, Minor: 2}}}); err != nil {
		t.Fatal(err)
	}
	if info, err := d.Info(ctx, "ssdcache-pvc-1"); err != nil || !info.InactiveTable {
		t.Fatalf("after Load: %+v, %v; want an inactive table", info, err)
	}
	if err := d.ClearInactive(ctx, "ssdcache-pvc-1"); err != nil {
		t.Fatal(err)
	}
	info, err := d.Info(ctx, "ssdcache-pvc-1")
	if err != nil || info.InactiveTable {
		t.Fatalf("after ClearInactive: %+v, %v; want no inactive table", info, err)
	}
	if after, err := d.Table(ctx, "ssdcache-pvc-1"); err != nil || !after.Equal(before) {
		t.Fatalf("live table after ClearInactive: %v, %v; want %v", after, err, before)
	}
}

// WrittenAreasAmong prints only the lines of the areas asked for, one
// message per run of consecutive areas, and names each by its line; the
// last area, shorter than the others, is named by its line too. Past
// maxAreaRuns runs it prints the region once.
func TestWrittenAreasAmongReadsOnlyTheirLines(t *testing.T) {
	k := kernelDevices()
	d := NewDmsetup(nil).ReadingFrom(k)
	line := func(start, length, writes uint64) string {
		return fmt.Sprintf("%d+%d 0 0 0 0 %d 0 %d 0 0 0 0\n", start, length, writes, writes*8)
	}
	k.answers = map[string]map[string]string{"ssdcache-pvc-1": {
		"@stats_print 7 3 2":  line(384, 128, 1) + line(512, 128, 0),
		"@stats_print 7 10 1": line(1280, 40, 2), // the region's last area is shorter
	}}
	got, err := d.WrittenAreasAmong(context.Background(), "ssdcache-pvc-1", 7, []uint64{3, 4, 4, 10})
	if err != nil || !slices.Equal(got, []uint64{3, 10}) {
		t.Fatalf("written areas %v (%v), want [3 10]", got, err)
	}
	if want := []string{"ssdcache-pvc-1 0 @stats_print 7 3 2", "ssdcache-pvc-1 0 @stats_print 7 10 1"}; !slices.Equal(k.messages, want) {
		t.Fatalf("messages %q, want %q", k.messages, want)
	}

	var many []uint64
	var all strings.Builder
	for a := range uint64(2 * maxAreaRuns) {
		many = append(many, 2*a) // every other area: a run each
		all.WriteString(line(2*a*128, 128, 1))
		all.WriteString(line((2*a+1)*128, 128, 1))
	}
	k.answers["ssdcache-pvc-1"]["@stats_print 7"] = all.String()
	k.messages = nil
	got, err = d.WrittenAreasAmong(context.Background(), "ssdcache-pvc-1", 7, many)
	if err != nil || !slices.Equal(got, many) || !slices.Equal(k.messages, []string{"ssdcache-pvc-1 0 @stats_print 7"}) {
		t.Fatalf("%d runs: written %v (%v) after %q; want the areas asked for, from one print of the region", 2*maxAreaRuns, got, err, k.messages)
	}
}
