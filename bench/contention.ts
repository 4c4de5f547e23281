/**
 * How much CPU other processes took while a benchmark ran: the machine's
 * busy time (/proc/stat) less this process's and its waited-for children's
 * (/proc/self/stat), over the wall time. The 1-minute load average cannot
 * tell: after a run of T threads it stays near T for minutes, so the next
 * file's runs would look contended on an idle machine. Steal time (a VM's
 * vCPUs waiting for the host) is reported apart: it slows both engines
 * without any process here running.
 *
 * @module
 */

/** A reading of the CPU counters, in clock ticks. */
export interface CpuSnapshot {
  /** Busy ticks of all CPUs (user, nice, system, irq, softirq). */
  readonly busy: number;
  /** Ticks stolen from this VM's vCPUs by the host. */
  readonly steal: number;
  /** This process's user+system ticks and its reaped children's. */
  readonly self: number;
  /** performance.now() at the reading. */
  readonly at: number;
}

/** What other processes took between two snapshots. */
export interface Contention {
  /** CPU cores' worth of time other processes used (0 on a quiet machine). */
  readonly otherCores: number;
  /** Cores' worth of steal time. */
  readonly stealCores: number;
}

// USER_HZ: the unit of /proc/stat and /proc/self/stat on every Linux ABI.
const TICKS_PER_S = 100;

/** Reads the counters; undefined where /proc is not readable. */
export function cpuSnapshot(): CpuSnapshot | undefined {
  try {
    const cpu = Deno.readTextFileSync("/proc/stat").split("\n")[0].trim().split(/\s+/).slice(1)
      .map(Number);
    const [user, nice, system, , , irq, softirq, steal] = cpu;
    const stat = Deno.readTextFileSync("/proc/self/stat");
    // the fields after the command name, which may hold spaces: 14-17 are utime..cstime
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ").map(Number);
    const self = f[11] + f[12] + f[13] + f[14];
    return { busy: user + nice + system + irq + softirq, steal, self, at: performance.now() };
  } catch {
    return undefined;
  }
}

/** Other processes' share between `a` and `b` (b taken after a). */
export function contention(a: CpuSnapshot, b: CpuSnapshot): Contention {
  const s = (b.at - a.at) / 1000;
  const other = (b.busy - a.busy) - (b.self - a.self);
  return {
    otherCores: Math.max(0, other) / TICKS_PER_S / s,
    stealCores: (b.steal - a.steal) / TICKS_PER_S / s,
  };
}
