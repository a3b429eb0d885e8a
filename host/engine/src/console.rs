//! Serial consoles (Ironic's console interfaces): the ports they listen on.

/// The TCP ports consoles listen on (Ironic's `[console] port_range`), both ends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    /// `first:last`, as Ironic writes it.
    pub fn parse(text: &str) -> Result<PortRange, String> {
        let bad =
            || format!("console port_range {text:?} is not first:last (two ports, first <= last)");
        let (first, last) = text.split_once(':').ok_or_else(bad)?;
        let first: u16 = first.trim().parse().map_err(|_| bad())?;
        let last: u16 = last.trim().parse().map_err(|_| bad())?;
        if first == 0 || first > last {
            return Err(bad());
        }
        Ok(PortRange { first, last })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_range_is_first_colon_last() {
        assert_eq!(
            PortRange::parse("10000:20000"),
            Ok(PortRange {
                first: 10000,
                last: 20000
            })
        );
        assert_eq!(PortRange::parse("5:5"), Ok(PortRange { first: 5, last: 5 }));
        for bad in ["", "10000", "2:1", "0:4", "1:70000", "a:b"] {
            assert!(PortRange::parse(bad).is_err(), "{bad}");
        }
    }
}
