//! The server's surface for engineers: reflection (v1 and v1alpha, which grpcurl 1.8 asks)
//! and health.

use crate::support::*;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

macro_rules! list_services {
    ($module:path, $addr:expr) => {{
        use $module as r;
        let ch = tonic::transport::Channel::from_shared(format!("http://{}", $addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = r::server_reflection_client::ServerReflectionClient::new(ch);
        let requests = vec![
            r::ServerReflectionRequest {
                host: String::new(),
                message_request: Some(r::server_reflection_request::MessageRequest::ListServices(
                    String::new(),
                )),
            },
            r::ServerReflectionRequest {
                host: String::new(),
                message_request: Some(
                    r::server_reflection_request::MessageRequest::FileContainingSymbol(
                        "ledger.v1.Ledger".into(),
                    ),
                ),
            },
        ];
        let mut stream = client
            .server_reflection_info(futures_util::stream::iter(requests))
            .await
            .unwrap()
            .into_inner();
        let mut services = Vec::new();
        let mut files = 0;
        while let Some(msg) = stream.message().await.unwrap() {
            match msg.message_response.unwrap() {
                r::server_reflection_response::MessageResponse::ListServicesResponse(l) => {
                    services.extend(l.service.into_iter().map(|s| s.name))
                }
                r::server_reflection_response::MessageResponse::FileDescriptorResponse(f) => {
                    files += f.file_descriptor_proto.len()
                }
                other => panic!("unexpected reflection answer {other:?}"),
            }
        }
        (services, files)
    }};
}

#[tokio::test]
async fn reflection_v1_and_v1alpha_both_list_the_ledger_and_describe_it() {
    let t = TestLedger::start().await;
    let addr = t.server.as_ref().unwrap().local_addr;
    let (v1, files_v1) = list_services!(tonic_reflection::pb::v1, addr);
    let (v1alpha, files_v1alpha) = list_services!(tonic_reflection::pb::v1alpha, addr);
    for services in [&v1, &v1alpha] {
        assert!(
            services.iter().any(|s| s == "ledger.v1.Ledger"),
            "{services:?}"
        );
        assert!(
            services.iter().any(|s| s == "grpc.health.v1.Health"),
            "{services:?}"
        );
    }
    assert!(files_v1 > 0 && files_v1alpha > 0);
}

#[tokio::test]
async fn health_reports_serving_once_the_database_answers() {
    let t = TestLedger::start().await;
    let addr = t.server.as_ref().unwrap().local_addr;
    let ch = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = HealthClient::new(ch);
    for service in ["", "ledger.v1.Ledger"] {
        let s = h
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            s.status,
            tonic_health::ServingStatus::Serving as i32,
            "{service:?}"
        );
    }
}

#[tokio::test]
async fn reflection_describes_the_error_reason_enum_with_every_reason() {
    use prost::Message;
    use tonic_reflection::pb::v1 as r;
    let t = TestLedger::start().await;
    let addr = t.server.as_ref().unwrap().local_addr;
    let ch = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = r::server_reflection_client::ServerReflectionClient::new(ch);
    let request = r::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            r::server_reflection_request::MessageRequest::FileContainingSymbol(
                "ledger.v1.ErrorReason".into(),
            ),
        ),
    };
    let mut stream = client
        .server_reflection_info(futures_util::stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let answer = stream.message().await.unwrap().unwrap().message_response;
    let Some(r::server_reflection_response::MessageResponse::FileDescriptorResponse(f)) = answer
    else {
        panic!("reflection does not describe ledger.v1.ErrorReason: {answer:?}");
    };
    let file = prost_types::FileDescriptorProto::decode(&f.file_descriptor_proto[0][..]).unwrap();
    assert_eq!(file.name(), "ledger/v1/error_reason.proto");
    let values: Vec<&str> = file.enum_type[0].value.iter().map(|v| v.name()).collect();
    let mut want = vec!["ERROR_REASON_UNSPECIFIED"];
    want.extend(ledger_core::error::ALL_REASONS.iter().map(|r| r.as_str()));
    assert_eq!(values, want);
}
