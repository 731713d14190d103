//! The model's parameters: the NVLink and network links (α-β, [`LinkModel`]), the α of a
//! PortChannel step across the network, the proxy's CPU cost per message, the LL payload factor
//! η, and how many GPUs share a NIC; saved as JSON.

use serde::{Deserialize, Serialize};
use weft_core::LinkModel;

use crate::ModelError;

/// What the model's times are computed from.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// A GPU's NVLink: α per step, β of one GPU's NVLink in each direction.
    pub nvlink: LinkModel,
    /// A NIC: α per message, β in each direction. α is what a step whose receiver polls for the
    /// data pays per crossing (a GIN put and its signal: NVRAR, 2PH).
    pub net: LinkModel,
    /// α, µs, of a step of weft's PortChannel algorithms (`port_ring`, `port_allpairs`) across
    /// the network: a `put_with_signal` whose signal the proxy writes only once the put's copy
    /// is complete, so a step pays the copy's completion and a second write on top of `net`'s
    /// α. `None`: `net`'s α.
    pub port_alpha_us: Option<f64>,
    /// CPU time, in µs, one proxy thread spends posting one message (simulator only: a GPU's
    /// proxy posts its messages one after another).
    pub proxy_us: f64,
    /// η: bytes on the wire per byte of data of an LL transfer (LL8 packs 4 data bytes with a
    /// 4-byte flag: 2).
    pub ll_factor: f64,
    /// GPUs of a node that share one NIC (simulator only; the closed forms assume a NIC per GPU).
    pub gpus_per_nic: usize,
}

impl Params {
    /// NVLink and network links, no proxy cost, η = 2, a NIC per GPU.
    pub fn new(nvlink: LinkModel, net: LinkModel) -> Self {
        Self { nvlink, net, port_alpha_us: None, proxy_us: 0.0, ll_factor: 2.0, gpus_per_nic: 1 }
    }

    /// The network as a PortChannel step sees it: [`Params::port_alpha_us`] (or the network's
    /// α) and the network's β.
    pub fn port_link(&self) -> LinkModel {
        match self.port_alpha_us {
            Some(alpha) => LinkModel::new(alpha, gbps(&self.net)),
            None => self.net,
        }
    }

    /// Checks the values make sense (η ≥ 1, a non-negative proxy cost and PortChannel α, at
    /// least one GPU per NIC).
    pub fn validate(&self) -> Result<(), ModelError> {
        if let Some(alpha) = self.port_alpha_us.filter(|a| !(a.is_finite() && *a >= 0.0)) {
            return Err(ModelError::BadParameter(format!("the PortChannel α must be ≥ 0 µs, not {alpha}")));
        }
        if !(self.ll_factor.is_finite() && self.ll_factor >= 1.0) {
            return Err(ModelError::BadParameter(format!("η must be at least 1, not {}", self.ll_factor)));
        }
        if !(self.proxy_us.is_finite() && self.proxy_us >= 0.0) {
            return Err(ModelError::BadParameter(format!("the proxy cost must be ≥ 0 µs, not {}", self.proxy_us)));
        }
        if self.gpus_per_nic == 0 {
            return Err(ModelError::BadParameter("at least one GPU per NIC".into()));
        }
        Ok(())
    }

    /// The file form, with where each value came from.
    pub fn to_file(&self, sources: Vec<String>) -> ParamsFile {
        ParamsFile {
            nvlink_alpha_us: alpha_us(&self.nvlink),
            nvlink_gbps: gbps(&self.nvlink),
            net_alpha_us: alpha_us(&self.net),
            net_gbps: gbps(&self.net),
            port_alpha_us: self.port_alpha_us,
            proxy_us: self.proxy_us,
            ll_factor: self.ll_factor,
            gpus_per_nic: self.gpus_per_nic,
            sources,
        }
    }
}

/// [`Params`] as `weft model calibrate` writes them and `weft model predict --params` reads them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParamsFile {
    /// NVLink α, µs.
    pub nvlink_alpha_us: f64,
    /// NVLink β, GB/s (`null`: uncapped).
    pub nvlink_gbps: Option<f64>,
    /// Network α, µs.
    pub net_alpha_us: f64,
    /// Network β per NIC, GB/s (`null`: uncapped).
    pub net_gbps: Option<f64>,
    /// α of a PortChannel step across the network, µs (absent: the network's α).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_alpha_us: Option<f64>,
    /// Proxy CPU cost per message, µs.
    pub proxy_us: f64,
    /// η of LL transfers.
    pub ll_factor: f64,
    /// GPUs sharing a NIC.
    pub gpus_per_nic: usize,
    /// Where each value came from (files, variables, flags).
    pub sources: Vec<String>,
}

impl ParamsFile {
    /// The parameters, checked.
    pub fn params(&self) -> Result<Params, ModelError> {
        let params = Params {
            nvlink: link("NVLink", self.nvlink_alpha_us, self.nvlink_gbps)?,
            net: link("network", self.net_alpha_us, self.net_gbps)?,
            port_alpha_us: self.port_alpha_us,
            proxy_us: self.proxy_us,
            ll_factor: self.ll_factor,
            gpus_per_nic: self.gpus_per_nic,
        };
        params.validate()?;
        Ok(params)
    }
}

/// The link `name` of α `alpha_us` µs and β `gbps` GB/s (`None`: uncapped), refusing what
/// [`LinkModel::new`] would quietly turn into another link: a negative or non-finite α (made 0),
/// a β that is not a positive number (made uncapped).
pub fn link(name: &str, alpha_us: f64, gbps: Option<f64>) -> Result<LinkModel, ModelError> {
    if !(alpha_us.is_finite() && alpha_us >= 0.0) {
        return Err(ModelError::BadParameter(format!("{name} α must be ≥ 0 µs, not {alpha_us}")));
    }
    if let Some(g) = gbps.filter(|g| !(g.is_finite() && *g > 0.0)) {
        return Err(ModelError::BadParameter(format!("{name} β must be a positive number of GB/s, not {g}")));
    }
    Ok(LinkModel::new(alpha_us, gbps))
}

/// α of `link` in µs.
pub fn alpha_us(link: &LinkModel) -> f64 {
    link.latency.as_secs_f64() * 1e6
}

/// β of `link` in GB/s (`None`: uncapped).
pub fn gbps(link: &LinkModel) -> Option<f64> {
    link.bytes_per_second.map(|b| b as f64 / 1e9)
}

/// µs `link` takes per byte (0 when uncapped).
pub fn us_per_byte(link: &LinkModel) -> f64 {
    link.bytes_per_second.map_or(0.0, |b| 1e6 / b as f64)
}

/// The α-β time, in µs, of one message of `bytes` (fractional: a share of a message) on an
/// idle `link`.
pub fn message_us(link: &LinkModel, bytes: f64) -> f64 {
    alpha_us(link) + bytes * us_per_byte(link)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use super::*;

    #[test]
    fn the_file_form_round_trips_and_is_checked() {
        let mut params = Params::new(LinkModel::new(0.5, Some(370.0)), LinkModel::new(2.0, Some(50.0)));
        params.proxy_us = 0.25;
        params.port_alpha_us = Some(6.5);
        let file = params.to_file(vec!["flags".into()]);
        let text = serde_json::to_string(&file).unwrap();
        let back: ParamsFile = serde_json::from_str(&text).unwrap();
        assert_eq!(back.params().unwrap(), params);
        assert!((message_us(&params.net, 50_000.0) - 3.0).abs() < 1e-9);
        let bad = ParamsFile { ll_factor: 0.5, ..file.clone() };
        assert!(bad.params().is_err());
        // A β of 0 or an α below 0 is refused, not read as an uncapped or a free link.
        for bad in [
            ParamsFile { net_gbps: Some(0.0), ..file.clone() },
            ParamsFile { nvlink_gbps: Some(f64::NAN), ..file.clone() },
            ParamsFile { net_alpha_us: -1.0, ..file.clone() },
            ParamsFile { port_alpha_us: Some(-1.0), ..file.clone() },
        ] {
            assert!(bad.params().unwrap_err().to_string().contains("must be"), "{bad:?}");
        }
        assert_eq!(ParamsFile { net_gbps: None, ..file.clone() }.params().unwrap().net.bytes_per_second, None);
        // The PortChannel's link: its own α, the network's β; a file without it (written before
        // it existed) reads as the network's α.
        assert_eq!(params.port_link(), LinkModel::new(6.5, Some(50.0)));
        let mut old = serde_json::to_value(&file).unwrap();
        old.as_object_mut().unwrap().remove("port_alpha_us");
        let old: ParamsFile = serde_json::from_value(old).unwrap();
        assert_eq!(old.params().unwrap().port_link(), params.net);
    }
}
