//! Maps every ledger error to a gRPC status with a `google.rpc.ErrorInfo` detail (domain
//! `ledger`), in one exhaustive match.

use ledger_core::error::Class;
use ledger_core::LedgerError;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The `ErrorInfo` domain of every error.
pub const ERROR_DOMAIN: &str = "ledger";

/// The status code for an error class.
pub fn code(class: Class) -> Code {
    match class {
        Class::InvalidArgument => Code::InvalidArgument,
        Class::NotFound => Code::NotFound,
        Class::FailedPrecondition => Code::FailedPrecondition,
        Class::Unavailable => Code::Unavailable,
        Class::Unauthenticated => Code::Unauthenticated,
        Class::PermissionDenied => Code::PermissionDenied,
        Class::DeadlineExceeded => Code::DeadlineExceeded,
        Class::DataLoss => Code::DataLoss,
        Class::Aborted => Code::Aborted,
    }
}

/// A status carrying the reason as `ErrorInfo`.
pub fn to_status(e: LedgerError) -> Status {
    let details = ErrorDetails::with_error_info(
        e.reason.as_str(),
        ERROR_DOMAIN,
        e.metadata
            .into_iter()
            .collect::<std::collections::HashMap<String, String>>(),
    );
    Status::with_error_details(code(e.reason.class()), e.message, details)
}

/// The `google.rpc.Status` of an error: what a failed call carries in
/// `grpc-status-details-bin` (code, message, `ErrorInfo`), for answers that hold errors
/// (`PostBatch` results). Built through [`to_status`], so it is exactly the failed call's.
pub fn to_rpc_status(e: LedgerError) -> tonic_types::pb::Status {
    use prost::Message;
    tonic_types::pb::Status::decode(to_status(e).details())
        .expect("tonic-types encodes a google.rpc.Status")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger_core::error::ALL_REASONS;

    #[test]
    fn every_reason_maps_to_its_code_with_error_info() {
        for &r in ALL_REASONS {
            let s = to_status(LedgerError::new(r, "msg").with("field", "memo"));
            let info = s.get_details_error_info().expect("error info");
            assert_eq!(info.reason, r.as_str());
            assert!(
                ledger_client::pb::ErrorReason::from_str_name(&info.reason).is_some(),
                "{} is a value of the proto's enum ErrorReason",
                info.reason
            );
            assert_eq!(info.domain, "ledger");
            assert_eq!(info.metadata.get("field").map(String::as_str), Some("memo"));
            assert_eq!(s.message(), "msg");
            assert_ne!(s.code(), Code::Internal);
            assert_ne!(s.code(), Code::Unknown);
        }
    }

    #[test]
    fn an_error_as_a_batch_result_is_the_status_a_failed_call_carries() {
        let e = LedgerError::new(ledger_core::Reason::InsufficientFunds, "short")
            .with("account", "acct:1");
        let call = to_status(e.clone());
        let rpc = to_rpc_status(e);
        assert_eq!(rpc.code, Code::FailedPrecondition as i32);
        assert_eq!(rpc.message, "short");
        let rebuilt = Status::with_details(
            Code::from_i32(rpc.code),
            rpc.message.clone(),
            prost::Message::encode_to_vec(&rpc).into(),
        );
        let (a, b) = (
            rebuilt.get_details_error_info().unwrap(),
            call.get_details_error_info().unwrap(),
        );
        assert_eq!(
            (a.reason, a.domain, a.metadata),
            (b.reason, b.domain, b.metadata)
        );
        assert_eq!(rebuilt.details(), call.details());
    }

    /// The core's `Reason` and the client's `pb::ErrorReason` are both generated from the
    /// proto's `enum ErrorReason`, by two generators: they must agree value for value, in
    /// name and in variant, with the enum of the descriptor set that reflection serves.
    #[test]
    fn every_value_of_the_protos_error_reason_is_a_core_reason_of_the_same_name_and_back() {
        use ledger_client::pb::ErrorReason;
        use prost::Message;
        let fds = prost_types::FileDescriptorSet::decode(ledger_client::FILE_DESCRIPTOR_SET)
            .expect("the served descriptor set decodes");
        let values: Vec<&str> = fds
            .file
            .iter()
            .flat_map(|f| &f.enum_type)
            .filter(|e| e.name() == "ErrorReason")
            .flat_map(|e| &e.value)
            .filter(|v| v.number() != 0)
            .map(|v| v.name())
            .collect();
        assert_eq!(values.len(), ALL_REASONS.len(), "{values:?}");
        for name in values {
            let pb = ErrorReason::from_str_name(name).expect("prost generated the value");
            let core = ledger_core::Reason::from_str_exact(name)
                .unwrap_or_else(|| panic!("ledger-core has no {name}"));
            assert_eq!(format!("{pb:?}"), format!("{core:?}"), "one variant name");
        }
        for &r in ALL_REASONS {
            let pb = ErrorReason::from_str_name(r.as_str())
                .unwrap_or_else(|| panic!("the proto has no {}", r.as_str()));
            assert_eq!(pb.as_str_name(), r.as_str());
            assert_ne!(pb, ErrorReason::Unspecified);
        }
        assert_eq!(
            ledger_core::Reason::from_str_exact(ErrorReason::Unspecified.as_str_name()),
            None,
            "the zero value is no reason"
        );
    }
}
