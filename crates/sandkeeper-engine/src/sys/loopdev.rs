//! Loop devices: which file backs one, by device and inode.
#![allow(unsafe_code)]

use std::os::fd::BorrowedFd;

/// `struct loop_info64` of `<linux/loop.h>`: what `LOOP_GET_STATUS64`
/// fills in. Only the backing file's identity is read.
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `LOOP_GET_STATUS64` (not `_IOR`-encoded: the loop ioctls predate that).
const LOOP_GET_STATUS64: rustix::ioctl::Opcode = 0x4C05;

/// `ioctl(fd, LOOP_GET_STATUS64)`: the `(device, inode)` of the file that
/// backs the loop device open at `fd`, as the kernel saw it when the file
/// was attached (`st_dev` encoding, as `makedev(3)`). `ENXIO` when the
/// device is not bound.
///
/// The caller must have checked that `fd` is a loop block device (its
/// `st_rdev` is that of a `/sys/block/loopN`): another driver could give the
/// same request number another meaning.
///
/// # References
///
/// - [loop(4)](https://man7.org/linux/man-pages/man4/loop.4.html)
pub(crate) fn loop_backing_inode(fd: BorrowedFd<'_>) -> rustix::io::Result<(u64, u64)> {
    // SAFETY: LOOP_GET_STATUS64 writes exactly one `struct loop_info64`,
    // whose layout `LoopInfo64` repeats (all fields plain integers, no
    // padding on any Linux target), and reads nothing from user memory.
    let getter = unsafe { rustix::ioctl::Getter::<LOOP_GET_STATUS64, LoopInfo64>::new() };
    // SAFETY: as above; `fd` is a loop device (checked by the caller), so
    // the request means LOOP_GET_STATUS64 and the output fits `LoopInfo64`.
    let info = unsafe { rustix::ioctl::ioctl(fd, getter) }?;
    Ok((info.lo_device, info.lo_inode))
}

#[cfg(test)]
mod tests {
    #[test]
    fn loop_info64_has_the_kernel_size() {
        assert_eq!(std::mem::size_of::<super::LoopInfo64>(), 232);
    }
}
