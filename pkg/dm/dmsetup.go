package dm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/ssdcache/ssdcache/pkg/command"
)

// Dmsetup implements Interface with the dmsetup tool, and reads through the
// control device instead when given one (ReadingFrom).
type Dmsetup struct {
	run *command.Runner
	// kernel, when set, answers List, Info, Table, Status and States.
	kernel *kernelIoctls
}

// NewDmsetup returns an Interface that runs dmsetup through run.
func NewDmsetup(run *command.Runner) *Dmsetup { return &Dmsetup{run: run} }

// ReadingFrom makes d read devices, tables and statuses, load and clear
// tables and suspend and resume devices with ioctls on c rather than dmsetup
// processes; creating and removing devices still run dmsetup, which makes
// and removes their /dev/mapper nodes.
func (d *Dmsetup) ReadingFrom(c Control) *Dmsetup {
	d.kernel = &kernelIoctls{ctl: c}
	return d
}

var _ Interface = (*Dmsetup)(nil)

func (d *Dmsetup) dmsetup(ctx context.Context, args ...string) (string, error) {
	out, err := d.run.Run(ctx, "dmsetup", args...)
	if err != nil {
		var cmdErr *command.Error
		if errors.As(err, &cmdErr) && isNotFound(cmdErr.Stderr) {
			return "", fmt.Errorf("dmsetup %s: %w", strings.Join(args, " "), ErrNotFound)
		}
		return "", err
	}
	return string(out), nil
}

func isNotFound(stderr string) bool {
	return strings.Contains(stderr, "Device does not exist") ||
		strings.Contains(stderr, "No such device or address")
}

func (d *Dmsetup) Create(ctx context.Context, name string, table Table) error {
	if _, err := d.run.RunWithInput(ctx, []byte(table.String()+"\n"), "dmsetup", "create", name); err != nil {
		return err
	}
	// Without udev nobody else creates /dev/mapper/<name>; mknodes is a no-op when it exists.
	_, err := d.dmsetup(ctx, "mknodes", name)
	return err
}

func (d *Dmsetup) Load(ctx context.Context, name string, table Table) error {
	if d.kernel != nil {
		return d.kernel.load(ctx, name, table)
	}
	_, err := d.run.RunWithInput(ctx, []byte(table.String()+"\n"), "dmsetup", "load", name)
	return err
}

func (d *Dmsetup) Suspend(ctx context.Context, name string) error {
	if d.kernel != nil {
		return d.kernel.suspend(ctx, name, true)
	}
	_, err := d.dmsetup(ctx, "suspend", "--nolockfs", name)
	return err
}

func (d *Dmsetup) SuspendNoFlush(ctx context.Context, name string) error {
	if d.kernel != nil {
		return d.kernel.suspendNoFlush(ctx, name)
	}
	_, err := d.dmsetup(ctx, "suspend", "--noflush", "--nolockfs", name)
	return err
}

func (d *Dmsetup) Resume(ctx context.Context, name string) error {
	if d.kernel != nil {
		return d.kernel.suspend(ctx, name, false)
	}
	_, err := d.dmsetup(ctx, "resume", name)
	return err
}

func (d *Dmsetup) ClearInactive(ctx context.Context, name string) error {
	if d.kernel != nil {
		return d.kernel.clear(name)
	}
	_, err := d.dmsetup(ctx, "clear", name)
	return err
}

// Remove retries while the device is busy: udev's blkid opens a device for
// a moment after every table load, and with many volumes changing at once
// its queue runs late enough to meet an unstage (make stress saw it).
func (d *Dmsetup) Remove(ctx context.Context, name string) error {
	_, err := d.dmsetup(ctx, "remove", "--retry", name)
	return err
}

func (d *Dmsetup) Table(ctx context.Context, name string) (Table, error) {
	out, err := d.read(ctx, name, true)
	if err != nil {
		return Table{}, err
	}
	return ParseTable(strings.TrimSpace(out))
}

func (d *Dmsetup) Status(ctx context.Context, name string) (string, error) {
	out, err := d.read(ctx, name, false)
	return strings.TrimSpace(out), err
}

// read is name's table (table true) or status line(s).
func (d *Dmsetup) read(ctx context.Context, name string, table bool) (string, error) {
	if d.kernel != nil {
		lines, err := d.kernel.lines(name, table)
		return strings.Join(lines, "\n"), err
	}
	if table {
		return d.dmsetup(ctx, "table", name)
	}
	return d.dmsetup(ctx, "status", "--noflush", name)
}

func (d *Dmsetup) List(ctx context.Context) ([]Device, error) {
	if d.kernel != nil {
		return d.kernel.list()
	}
	out, err := d.dmsetup(ctx, append([]string{"info"}, infoColumns...)...)
	if err != nil {
		return nil, err
	}
	return parseDeviceList(out)
}

func (d *Dmsetup) Info(ctx context.Context, name string) (Device, error) {
	if d.kernel != nil {
		return d.kernel.info(name)
	}
	out, err := d.dmsetup(ctx, append(append([]string{"info"}, infoColumns...), name)...)
	if err != nil {
		return Device{}, err
	}
	devs, err := parseDeviceList(out)
	if err != nil {
		return Device{}, err
	}
	if len(devs) != 1 {
		return Device{}, fmt.Errorf("dmsetup info %s: %w", name, ErrNotFound)
	}
	return devs[0], nil
}

// ListWithUUIDs is List with each device's UUID, through dmsetup (the
// control device's listing has no UUIDs): what tells an LV's device, which
// LVM made, from another of the same name.
func (d *Dmsetup) ListWithUUIDs(ctx context.Context) ([]Device, error) {
	out, err := d.dmsetup(ctx, "info", "-c", "--noheadings", "--separator", "|", "-o", "name,uuid,major,minor,attr,open")
	if err != nil {
		return nil, err
	}
	return parseUUIDList(out)
}

// parseUUIDList parses `dmsetup info -c --noheadings --separator '|' -o
// name,uuid,major,minor,attr,open`; a name may hold '|', so the fields are
// taken from the end.
func parseUUIDList(out string) ([]Device, error) {
	var devices []Device
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "No devices found") {
			continue
		}
		fields := strings.Split(line, "|")
		n := len(fields)
		if n < 6 {
			return nil, fmt.Errorf("dmsetup info line %q: want <name>|<uuid>|<major>|<minor>|<attr>|<open>", line)
		}
		name := strings.Join(fields[:n-5], "|")
		parsed, err := parseDeviceList(strings.Join([]string{"x", fields[n-4], fields[n-3], fields[n-2], fields[n-1]}, " "))
		if err != nil || len(parsed) != 1 {
			return nil, fmt.Errorf("dmsetup info line %q: %v", line, err)
		}
		dev := parsed[0]
		dev.Name, dev.UUID = name, fields[n-5]
		devices = append(devices, dev)
	}
	return devices, nil
}

var infoColumns = []string{"-c", "--noheadings", "--separator", " ", "-o", "name,major,minor,attr,open"}

// parseDeviceList parses `dmsetup info -c --noheadings -o name,major,minor,attr,open`.
// attr is (L)ive, (I)nactive, (s)uspended, (r)ead-only or read-(w)rite.
func parseDeviceList(out string) ([]Device, error) {
	var devices []Device
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(line, "No devices found") {
			continue
		}
		if len(fields) != 5 {
			return nil, fmt.Errorf("dmsetup info line %q: want <name> <major> <minor> <attr> <open>", line)
		}
		num, err := ParseDevNum(fields[1] + ":" + fields[2])
		if err != nil {
			return nil, fmt.Errorf("dmsetup info line %q: %w", line, err)
		}
		open, err := strconv.Atoi(fields[4])
		if err != nil || open < 0 {
			return nil, fmt.Errorf("dmsetup info line %q: open count %q", line, fields[4])
		}
		attr := fields[3]
		devices = append(devices, Device{
			Name: fields[0], DevNum: num, OpenCount: open,
			Suspended: strings.Contains(attr, "s"), InactiveTable: strings.Contains(attr, "I"),
		})
	}
	return devices, nil
}

func (d *Dmsetup) States(ctx context.Context, keep func(name string) bool) (map[string]DeviceState, error) {
	if d.kernel != nil {
		return d.kernel.states(keep)
	}
	tables, err := d.dmsetup(ctx, "table")
	if err != nil {
		return nil, err
	}
	statuses, err := d.dmsetup(ctx, "status", "--noflush")
	if err != nil {
		return nil, err
	}
	return parseStates(tables, statuses, keep)
}

// parseStates joins the "<name>: <line>" output of `dmsetup table` and
// `dmsetup status` for all devices.
func parseStates(tables, statuses string, keep func(name string) bool) (map[string]DeviceState, error) {
	tableLines := perDevice(tables)
	if keep != nil {
		// dmsetup prints every device at once: the others are dropped
		// before their tables are parsed, so a foreign table fails nothing.
		maps.DeleteFunc(tableLines, func(name string, _ []string) bool { return !keep(name) })
	}
	return joinStates(tableLines, perDevice(statuses))
}

// joinStates joins each device's table and status lines. Devices with
// other than one target, and those in only one of the two (created or
// removed between the reads), are left out.
func joinStates(tableLines, statusLines map[string][]string) (map[string]DeviceState, error) {
	states := map[string]DeviceState{}
	for name, lines := range tableLines {
		status, ok := statusLines[name]
		if len(lines) != 1 || !ok || len(status) != 1 {
			continue
		}
		table, err := ParseTable(lines[0])
		if err != nil {
			return nil, fmt.Errorf("table of %s: %w", name, err)
		}
		states[name] = DeviceState{Table: table, Status: status[0]}
	}
	return states, nil
}

func perDevice(out string) map[string][]string {
	lines := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		name, rest, ok := strings.Cut(line, ": ")
		if ok && name != "" && strings.TrimSpace(rest) != "" {
			lines[name] = append(lines[name], strings.TrimSpace(rest))
		}
	}
	return lines
}
