//! The client's own resource use: CPU time and resident memory of this process, so every cell
//! can show that the client kept up.

/// CPU time (user + system) consumed by this process so far, s. `None` where unsupported.
pub fn process_cpu_seconds() -> Option<f64> {
    #[cfg(unix)]
    {
        // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_SELF is always valid.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        if rc != 0 {
            return None;
        }
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Some(tv(ru.ru_utime) + tv(ru.ru_stime))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Current resident set size of this process, bytes (Linux `/proc/self/statm`). `None` elsewhere.
pub fn resident_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf with a valid name has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * if page > 0 { page as u64 } else { 4096 })
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_time_advances() {
        let a = super::process_cpu_seconds().unwrap();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        let b = super::process_cpu_seconds().unwrap();
        assert!(b >= a);
        assert!(super::resident_bytes().unwrap() > 0);
    }
}
