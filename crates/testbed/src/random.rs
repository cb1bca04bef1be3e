//! Randomness, from the kernel's random source: Kafka's cluster ids and SCRAM
//! passwords, the walk through the free ports, the temporary directories' names.

use std::io::Read;

/// `N` bytes from the kernel's random source.
pub fn bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("read /dev/urandom");
    bytes
}

/// 16 random bytes (a KRaft cluster id's).
pub fn bytes16() -> [u8; 16] {
    bytes()
}

/// A random `u32`.
pub fn u32() -> u32 {
    u32::from_le_bytes(bytes())
}

/// `2 * N` random hexadecimal digits (lower case).
pub fn hex<const N: usize>() -> String {
    bytes::<N>().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_differ_and_hex_has_two_digits_a_byte() {
        assert_ne!(bytes16(), bytes16());
        let text = hex::<16>();
        assert_eq!(text.len(), 32);
        assert!(text.bytes().all(|b| b.is_ascii_hexdigit()), "{text}");
    }
}
