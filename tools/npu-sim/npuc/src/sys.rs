//! The few POSIX calls npuc needs that Rust's standard library gained only after 1.63 (the
//! rustc of Debian 12, this crate's `rust-version`): a close-on-exec pipe (std 1.87), an
//! exclusive non-blocking file lock (std 1.89), setting a file's mtime (std 1.75). Each is the
//! same system call std makes, behind a safe function.
use std::fs::File;
use std::os::unix::io::{AsRawFd, FromRawFd};

extern "C" {
    fn pipe2(fds: *mut i32, flags: i32) -> i32;
    fn flock(fd: i32, op: i32) -> i32;
    fn futimens(fd: i32, times: *const Timespec) -> i32;
}

const O_CLOEXEC: i32 = 0o2_000_000;
const LOCK_EX: i32 = 2;
const LOCK_NB: i32 = 4;
const UTIME_NOW: i64 = (1 << 30) - 1;
const UTIME_OMIT: i64 = (1 << 30) - 2;

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

/// A pipe, both ends close-on-exec: (read end, write end), as `std::io::pipe`.
pub fn pipe() -> std::io::Result<(File, File)> {
    let mut fds = [-1i32; 2];
    // SAFETY: pipe2 writes two descriptors into the live two-element array.
    if unsafe { pipe2(fds.as_mut_ptr(), O_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}

/// Take an exclusive advisory lock (flock) without waiting, as `File::try_lock`: held until
/// the file is closed. Err when another open file description holds a lock on it.
pub fn try_lock(f: &File) -> std::io::Result<()> {
    // SAFETY: flock on a descriptor that `f` keeps open; no memory is involved.
    if unsafe { flock(f.as_raw_fd(), LOCK_EX | LOCK_NB) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Set the file's modification time to now, leaving its access time (as
/// `File::set_modified(SystemTime::now())`).
pub fn touch_modified(f: &File) -> std::io::Result<()> {
    let times = [Timespec { tv_sec: 0, tv_nsec: UTIME_OMIT }, Timespec { tv_sec: 0, tv_nsec: UTIME_NOW }];
    // SAFETY: futimens reads two timespecs from the live array; the descriptor is kept open by `f`.
    if unsafe { futimens(f.as_raw_fd(), times.as_ptr()) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn scratch(name: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("npuc-sys-{}-{}", std::process::id(), name));
        let _ = std::fs::remove_file(&p);
        p
    }

    #[test]
    fn pipe_carries_bytes_and_is_close_on_exec() {
        let (mut r, mut w) = pipe().unwrap();
        w.write_all(b"abc").unwrap();
        drop(w);
        let mut got = String::new();
        r.read_to_string(&mut got).unwrap();
        assert_eq!(got, "abc");
        let fd_flags = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", r.as_raw_fd())).unwrap();
        let flags = fd_flags.lines().find(|l| l.starts_with("flags:")).unwrap();
        let octal = i64::from_str_radix(flags.split_whitespace().nth(1).unwrap(), 8).unwrap();
        assert_ne!(octal & O_CLOEXEC as i64, 0, "{}", flags);
    }

    #[test]
    fn lock_is_exclusive_until_the_holder_closes() {
        let p = scratch("lock");
        let a = File::create(&p).unwrap();
        let b = File::open(&p).unwrap();
        try_lock(&a).unwrap();
        assert!(try_lock(&b).is_err(), "a second open file must not get the lock");
        drop(a);
        try_lock(&b).unwrap();
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn touch_sets_mtime_to_now_and_keeps_atime() {
        let p = scratch("touch");
        std::fs::write(&p, b"x").unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        let before = std::fs::metadata(&p).unwrap();
        // age the file by an hour through the same call with explicit times
        let secs = old.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        let aged = [Timespec { tv_sec: secs, tv_nsec: 0 }, Timespec { tv_sec: secs, tv_nsec: 0 }];
        // SAFETY: as in touch_modified.
        assert_eq!(unsafe { futimens(f.as_raw_fd(), aged.as_ptr()) }, 0);
        let atime = std::fs::metadata(&p).unwrap().accessed().unwrap();
        touch_modified(&f).unwrap();
        let after = std::fs::metadata(&p).unwrap();
        assert!(after.modified().unwrap() >= before.modified().unwrap());
        assert!(after.modified().unwrap() > old + std::time::Duration::from_secs(1800));
        assert_eq!(after.accessed().unwrap(), atime);
        let _ = std::fs::remove_file(&p);
    }
}
