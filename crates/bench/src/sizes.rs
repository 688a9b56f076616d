//! Message sizes: the default sweep and `--sizes` lists.

/// Largest size of the default sweep (the 4 MiB).
pub const MAX_DEFAULT_SIZE: u64 = 4 << 20;

/// Sizes around the jumps EMP saw: one Ethernet frame (1500 B MTU, 1472 B of UDP payload, our
/// 1400 B of frame payload) and one page (4096 B).
pub const JUMP_POINTS: [u64; 7] = [1400, 1472, 1500, 1600, 4000, 4096, 4200];

/// Sizes of `--quick`: a few points that cross every protocol path (eager, one frame, several
/// frames, rendezvous) and the 10 KB of the overhead and overlap patterns.
pub const QUICK_SIZES: [u64; 5] = [0, 8, 1500, 65536, 1 << 20];

/// 0, then powers of two up to `max`, plus [`JUMP_POINTS`] below `max`; sorted, no duplicates.
pub fn default_sweep(max: u64) -> Vec<u64> {
    let mut sizes = vec![0];
    let mut size = 1;
    while size <= max {
        sizes.push(size);
        size *= 2;
    }
    sizes.extend(JUMP_POINTS.iter().copied().filter(|&s| s <= max));
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// A sorted list of distinct message sizes (one command-line value: `--sizes 8,1K,1M`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sizes(pub Vec<u64>);

/// [`parse_list`] as a command-line value parser.
pub fn parse_sizes(text: &str) -> Result<Sizes, String> {
    parse_list(text).map(Sizes)
}

/// Parses `8,1K,64KiB,1M,4MiB` (K/M/G are powers of 1024, as in message sizes). Sorted, no
/// duplicates.
pub fn parse_list(text: &str) -> Result<Vec<u64>, String> {
    let mut sizes = text
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(parse_size)
        .collect::<Result<Vec<u64>, String>>()?;
    if sizes.is_empty() {
        return Err(format!("no sizes in {text:?}"));
    }
    sizes.sort_unstable();
    sizes.dedup();
    Ok(sizes)
}

/// Parses one size: a number with an optional K, M or G suffix (optionally followed by `iB` or
/// `B`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let upper = text.to_ascii_uppercase();
    let trimmed = upper
        .trim_end_matches("IB")
        .trim_end_matches('B')
        .trim_end();
    let (digits, shift) = match trimmed.chars().last() {
        Some('K') => (&trimmed[..trimmed.len() - 1], 10),
        Some('M') => (&trimmed[..trimmed.len() - 1], 20),
        Some('G') => (&trimmed[..trimmed.len() - 1], 30),
        _ => (trimmed, 0),
    };
    let number: u64 = digits
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a size (examples: 0, 8, 1500, 64K, 1M)"))?;
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// A size for tables: `512`, `1500`, `4K`, `64K`, `1M`.
pub fn label(size: u64) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{}M", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{}K", s >> 10),
        s => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_sweep_has_powers_and_jump_points() {
        let sizes = default_sweep(MAX_DEFAULT_SIZE);
        assert_eq!(sizes[..3], [0, 1, 2]);
        assert_eq!(*sizes.last().unwrap(), 4 << 20);
        for point in JUMP_POINTS {
            assert!(sizes.contains(&point));
        }
        assert!(sizes.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(default_sweep(1000).last(), Some(&512));
    }

    #[test]
    fn lists_with_units() {
        assert_eq!(
            parse_list("8, 1K,64KiB,1M,4MB").unwrap(),
            vec![8, 1024, 65536, 1 << 20, 4 << 20]
        );
        assert_eq!(parse_list("1500,0,1500").unwrap(), vec![0, 1500]);
        assert!(parse_list("").is_err());
        assert!(parse_list("eight").is_err());
        assert!(parse_size("99999999999G").is_err());
    }

    #[test]
    fn labels() {
        assert_eq!(label(1500), "1500");
        assert_eq!(label(4096), "4K");
        assert_eq!(label(1 << 20), "1M");
        assert_eq!(label(0), "0");
    }
}
