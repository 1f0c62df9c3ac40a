package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuSample is the machine's busy CPU time (all processes, from /proc/stat)
// and this process's CPU time (getrusage), at one instant.
type cpuSample struct {
	at           time.Time
	machineBusy  time.Duration // user+nice+system+irq+softirq+steal, all CPUs
	machineTotal time.Duration // the same plus idle and iowait
	self         time.Duration // this process, user+system
}

var clockTick = 100 // USER_HZ; 100 on every Linux this runs on

func sampleCPU() cpuSample {
	s := cpuSample{at: time.Now()}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	f, err := os.Open("/proc/stat")
	if err != nil {
		return s
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 8 && fields[0] == "cpu" {
			var v [8]int64
			for i := range v {
				v[i], _ = strconv.ParseInt(fields[i+1], 10, 64)
			}
			tick := time.Second / time.Duration(clockTick)
			busy := v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
			s.machineBusy = time.Duration(busy) * tick
			s.machineTotal = time.Duration(busy+v[3]+v[4]) * tick
		}
	}
	return s
}

// cpuUse is the CPU spent between two samples.
type cpuUse struct {
	Wall    time.Duration
	Busy    time.Duration // whole machine
	Total   time.Duration // whole machine capacity (wall × CPUs, as /proc/stat counts it)
	Self    time.Duration // this process (the Go client: scheduler + drivers)
	Others  time.Duration // Busy - Self: the database server (and any noise)
	NumCPUs int
}

func cpuBetween(a, b cpuSample) cpuUse {
	u := cpuUse{Wall: b.at.Sub(a.at), Busy: b.machineBusy - a.machineBusy, Total: b.machineTotal - a.machineTotal,
		Self: b.self - a.self, NumCPUs: runtime.NumCPU()}
	u.Others = max(u.Busy-u.Self, 0)
	return u
}

// Utilization is the machine's busy share in [0, 1].
func (u cpuUse) Utilization() float64 {
	if u.Total <= 0 {
		return 0
	}
	return float64(u.Busy) / float64(u.Total)
}

// memSample is the process's memory after a full GC.
type memSample struct {
	RSS, HWM  int64 // VmRSS, VmHWM, bytes
	HeapInuse uint64
	HeapAlloc uint64
}

// sampleMem runs a GC, returns freed memory to the OS and reads
// /proc/self/status.
func sampleMem() memSample {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := memSample{HeapInuse: ms.HeapInuse, HeapAlloc: ms.HeapAlloc}
	m.RSS, m.HWM = procMem("self")
	return m
}

// procMem reads a process's VmRSS and VmHWM (bytes) from
// /proc/<pid>/status.
func procMem(pid string) (rss, hwm int64) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	return rss, hwm
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// ---- statistics ----

// summary is the median and spread of one metric over repeated runs.
type summary struct {
	N             int
	Median        float64
	Min, Max      float64
	RelSpreadPerc float64 // (max-min)/median × 100
}

func summarize(xs []float64) summary {
	if len(xs) == 0 {
		return summary{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	out := summary{N: len(s), Median: quantile(s, 0.5), Min: s[0], Max: s[len(s)-1]}
	if out.Median != 0 {
		out.RelSpreadPerc = (out.Max - out.Min) / math.Abs(out.Median) * 100
	}
	return out
}

// quantile of sorted xs (nearest rank on the linear interpolation used by
// most tools: type 7).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	if len(sorted) == 1 {
		return sorted[0]
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	frac := pos - float64(lo)
	return sorted[lo] + (sorted[hi]-sorted[lo])*frac
}

func durationsQuantiles(ds []time.Duration, qs ...float64) []time.Duration {
	s := make([]float64, len(ds))
	for i, d := range ds {
		s[i] = float64(d)
	}
	sort.Float64s(s)
	out := make([]time.Duration, len(qs))
	for i, q := range qs {
		out[i] = time.Duration(quantile(s, q))
	}
	return out
}

// format renders a summary with a unit-aware formatter.
func (s summary) format(f func(float64) string) string {
	if s.N == 0 {
		return "-"
	}
	if s.N == 1 {
		return f(s.Median)
	}
	return fmt.Sprintf("%s  [%s .. %s, ±%.0f%%]", f(s.Median), f(s.Min), f(s.Max), s.RelSpreadPerc/2)
}

func fnum(v float64) string {
	switch {
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func fdur(v float64) string { return fmtDur(time.Duration(v)) }

func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	}
}

func fpct(v float64) string { return fmt.Sprintf("%.0f%%", v*100) }

func fmib(v float64) string { return mib(int64(v)) }

// settle waits, up to maxWait, for a one-second window in which the machine
// is at most maxBusy busy (other people's builds and tests share it), and
// returns the busy share of the last window: the background load the next
// run competes with.
func settle(maxBusy float64, maxWait time.Duration) float64 {
	deadline := time.Now().Add(maxWait)
	for {
		a := sampleCPU()
		time.Sleep(time.Second)
		u := cpuBetween(a, sampleCPU()).Utilization()
		if u <= maxBusy || !time.Now().Before(deadline) {
			return u
		}
	}
}

// ---- PostgreSQL server CPU, when the server runs on this machine ----

// procCPU reads utime+stime (and cutime+cstime: reaped children) of a
// process from /proc/<pid>/stat, with its parent pid.
func procCPU(pid int) (ppid int, self, children time.Duration, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return 0, 0, 0, false
	}
	num := func(k int) int64 { v, _ := strconv.ParseInt(f[k-3], 10, 64); return v }
	tick := time.Second / time.Duration(clockTick)
	return int(num(4)), time.Duration(num(14)+num(15)) * tick, time.Duration(num(16)+num(17)) * tick, true
}

// pgCPUSample is the CPU of one PostgreSQL server's processes: the
// postmaster's children now alive, by kind, and those already reaped.
type pgCPUSample struct {
	perPID map[int]time.Duration
	kind   map[int]string
	reaped time.Duration
}

// pgCPUUse is the server's CPU between two samples, by process kind.
type pgCPUUse struct {
	Total  time.Duration
	ByKind map[string]time.Duration // client backends, autovacuum, background (walwriter, checkpointer, …), exited
}

func samplePGCPU(postmaster int) (pgCPUSample, bool) {
	s := pgCPUSample{perPID: map[int]time.Duration{}, kind: map[int]string{}}
	_, self, reaped, ok := procCPU(postmaster)
	if !ok {
		return s, false
	}
	s.perPID[postmaster], s.kind[postmaster], s.reaped = self, "background", reaped
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return s, false
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, cpu, _, ok := procCPU(pid)
		if !ok || ppid != postmaster {
			continue
		}
		s.perPID[pid] = cpu
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		c := string(cmd)
		switch {
		case strings.Contains(c, "autovacuum"):
			s.kind[pid] = "autovacuum"
		case strings.HasPrefix(c, "postgres: ") && strings.Count(c, " ") >= 3 && !strings.Contains(c, "writer") &&
			!strings.Contains(c, "checkpointer") && !strings.Contains(c, "launcher"):
			s.kind[pid] = "client backends"
		default:
			s.kind[pid] = "background"
		}
	}
	return s, true
}

func pgCPUBetween(a, b pgCPUSample) pgCPUUse {
	u := pgCPUUse{ByKind: map[string]time.Duration{}}
	for pid, cpu := range b.perPID {
		d := cpu - a.perPID[pid] // a process new since a: all of its CPU
		u.ByKind[b.kind[pid]] += d
		u.Total += d
	}
	// Processes that exited: the postmaster's reaped-children counter grew
	// by their whole lifetime's CPU, of which a had already seen a part.
	var seenDead time.Duration
	for pid, cpu := range a.perPID {
		if _, alive := b.perPID[pid]; !alive {
			seenDead += cpu
		}
	}
	if d := b.reaped - a.reaped - seenDead; d > 0 {
		u.ByKind["exited (reaped)"] += d
		u.Total += d
	}
	return u
}
