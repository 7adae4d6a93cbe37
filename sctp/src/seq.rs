//! Serial-number arithmetic (RFC 1982) for TSNs and MIDs (32 bits) and SSNs
//! (16 bits): `a` is "before" `b` when the distance from `a` forward to `b` is
//! less than half the number space.

/// `a` comes before `b` in 32-bit serial order.
pub fn lt32(a: u32, b: u32) -> bool {
    a != b && b.wrapping_sub(a) < 1 << 31
}

/// `a` comes before or equals `b` in 32-bit serial order.
pub fn le32(a: u32, b: u32) -> bool {
    a == b || lt32(a, b)
}

/// `a` comes before `b` in 16-bit serial order.
pub fn lt16(a: u16, b: u16) -> bool {
    a != b && b.wrapping_sub(a) < 1 << 15
}

/// The later of two 32-bit serial numbers.
pub fn max32(a: u32, b: u32) -> u32 {
    if lt32(a, b) { b } else { a }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_wraps() {
        assert!(lt32(u32::MAX, 0));
        assert!(!lt32(0, u32::MAX));
        assert!(lt32(5, 6));
        assert!(!lt32(6, 6));
        assert!(le32(6, 6));
        assert!(lt16(u16::MAX, 1));
        assert_eq!(max32(u32::MAX - 1, 3), 3);
    }
}
