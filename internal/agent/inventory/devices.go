package inventory

import (
	"cmp"
	"net"
	"os"
	"slices"
	"strings"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
)

// virtualDisks are /sys/block name prefixes of devices that are not disks of
// their own: loop and RAM devices, compressed swap, device-mapper and md
// volumes over other disks, network block devices, optical and floppy drives.
var virtualDisks = []string{"loop", "ram", "zram", "dm-", "md", "nbd", "sr", "fd"}

// disks reads the whole disks from /sys/block: the size (in 512-byte
// sectors, whatever the device's block size), the model and whether they
// spin. Partitions and virtual devices are skipped.
func (h *host) disks() []*agentv1.Disk {
	entries, err := os.ReadDir(h.path("/sys/block"))
	if err != nil {
		h.log.Debug("inventory: no /sys/block", "err", err)
		return nil
	}
	var disks []*agentv1.Disk
	for _, e := range entries {
		name := e.Name()
		if slices.ContainsFunc(virtualDisks, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		dir := "/sys/block/" + name + "/"
		if _, err := os.Lstat(h.path(dir + "partition")); err == nil {
			continue
		}
		d := &agentv1.Disk{Name: name, Model: h.read(dir + "device/model")}
		if sectors, ok := h.readInt(dir + "size"); ok && sectors > 0 && sectors < 1<<54 {
			d.SizeBytes = sectors * 512
		}
		d.Rotational = h.read(dir+"queue/rotational") == "1"
		disks = append(disks, d)
	}
	slices.SortFunc(disks, func(a, b *agentv1.Disk) int { return cmp.Compare(a.Name, b.Name) })
	return disks
}

// nics reads the physical network interfaces from /sys/class/net: those with
// a device behind them, so not loopback, bridges, bonds, veths, tunnels or
// other virtual interfaces. Addresses come from the kernel, and only when the
// host is the one this process runs on.
func (h *host) nics() []*agentv1.NIC {
	entries, err := os.ReadDir(h.path("/sys/class/net"))
	if err != nil {
		h.log.Debug("inventory: no /sys/class/net", "err", err)
		return nil
	}
	var nics []*agentv1.NIC
	for _, e := range entries {
		name := e.Name()
		dir := "/sys/class/net/" + name + "/"
		if name == "lo" {
			continue
		}
		if _, err := os.Lstat(h.path(dir + "device")); err != nil {
			continue
		}
		n := &agentv1.NIC{Name: name, Mac: h.read(dir + "address")}
		// speed is -1, or unreadable (EINVAL), while the link is down.
		if s, ok := h.readInt(dir + "speed"); ok && s > 0 && s <= 1<<31-1 {
			n.SpeedMbps = int32(s)
		}
		if m, ok := h.readInt(dir + "mtu"); ok && m > 0 && m <= 1<<31-1 {
			n.Mtu = int32(m)
		}
		if h.live() {
			n.Addresses = h.addresses(name)
		}
		nics = append(nics, n)
	}
	slices.SortFunc(nics, func(a, b *agentv1.NIC) int { return cmp.Compare(a.Name, b.Name) })
	return nics
}

// addresses returns an interface's addresses in CIDR form, sorted.
func (h *host) addresses(name string) []string {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		h.log.Debug("inventory: interface", "name", name, "err", err)
		return nil
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		h.log.Debug("inventory: interface addresses", "name", name, "err", err)
		return nil
	}
	var out []string
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			out = append(out, ipn.String())
		}
	}
	slices.Sort(out)
	return out
}
