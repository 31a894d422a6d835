//! A placeholder port whose every call fails with a configuration error,
//! used for services whose real adapter is not built in yet.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::model::*;
use crate::traits::{Image, Network};

/// Fails every call with [`Error::Config`] naming the service.
#[derive(Clone, Copy, Debug)]
pub struct Unavailable {
    /// Service name used in the error message.
    pub service: &'static str,
}

impl Unavailable {
    fn err<T>(&self, op: &str) -> Result<T> {
        Err(Error::config(format!(
            "{} {op}: the {} adapter is not available in this build",
            self.service, self.service
        )))
    }
}

#[async_trait]
impl Image for Unavailable {
    async fn create_image(&self, _: &ImageCreate) -> Result<crate::model::Image> {
        self.err("create_image")
    }
    async fn get_image(&self, _: &str) -> Result<crate::model::Image> {
        self.err("get_image")
    }
    async fn list_images_by_name(&self, _: &str) -> Result<Vec<crate::model::Image>> {
        self.err("list_images_by_name")
    }
    async fn update_image(&self, _: &str, _: &[ImagePatchOp]) -> Result<crate::model::Image> {
        self.err("update_image")
    }
    async fn import_image_web_download(&self, _: &str, _: &str) -> Result<()> {
        self.err("import_image_web_download")
    }
    async fn delete_image(&self, _: &str) -> Result<()> {
        self.err("delete_image")
    }
}

#[async_trait]
impl Network for Unavailable {
    async fn get_network(&self, _: &str) -> Result<crate::model::Network> {
        self.err("get_network")
    }
    async fn list_networks(&self, _: &NetworkFilter) -> Result<Vec<crate::model::Network>> {
        self.err("list_networks")
    }
    async fn create_network(&self, _: &NetworkCreate) -> Result<crate::model::Network> {
        self.err("create_network")
    }
    async fn update_network(&self, _: &str, _: &NetworkUpdate) -> Result<crate::model::Network> {
        self.err("update_network")
    }
    async fn delete_network(&self, _: &str) -> Result<()> {
        self.err("delete_network")
    }
    async fn get_subnet(&self, _: &str) -> Result<Subnet> {
        self.err("get_subnet")
    }
    async fn list_subnets(&self, _: &SubnetFilter) -> Result<Vec<Subnet>> {
        self.err("list_subnets")
    }
    async fn create_subnet(&self, _: &SubnetCreate) -> Result<Subnet> {
        self.err("create_subnet")
    }
    async fn update_subnet(&self, _: &str, _: &SubnetUpdate) -> Result<Subnet> {
        self.err("update_subnet")
    }
    async fn delete_subnet(&self, _: &str) -> Result<()> {
        self.err("delete_subnet")
    }
    async fn get_router(&self, _: &str) -> Result<Router> {
        self.err("get_router")
    }
    async fn list_routers(&self, _: &RouterFilter) -> Result<Vec<Router>> {
        self.err("list_routers")
    }
    async fn create_router(&self, _: &RouterCreate) -> Result<Router> {
        self.err("create_router")
    }
    async fn update_router(&self, _: &str, _: &RouterUpdate) -> Result<Router> {
        self.err("update_router")
    }
    async fn delete_router(&self, _: &str) -> Result<()> {
        self.err("delete_router")
    }
    async fn add_router_interface(&self, _: &str, _: &str) -> Result<RouterInterface> {
        self.err("add_router_interface")
    }
    async fn remove_router_interface(&self, _: &str, _: &str) -> Result<()> {
        self.err("remove_router_interface")
    }
    async fn list_router_interfaces(&self, _: &str) -> Result<Vec<RouterPort>> {
        self.err("list_router_interfaces")
    }
    async fn get_security_group(&self, _: &str) -> Result<SecurityGroup> {
        self.err("get_security_group")
    }
    async fn list_security_groups(&self, _: &SecurityGroupFilter) -> Result<Vec<SecurityGroup>> {
        self.err("list_security_groups")
    }
    async fn create_security_group(&self, _: &SecurityGroupCreate) -> Result<SecurityGroup> {
        self.err("create_security_group")
    }
    async fn update_security_group(
        &self,
        _: &str,
        _: &SecurityGroupUpdate,
    ) -> Result<SecurityGroup> {
        self.err("update_security_group")
    }
    async fn delete_security_group(&self, _: &str) -> Result<()> {
        self.err("delete_security_group")
    }
    async fn list_security_group_rules(&self, _: &str) -> Result<Vec<SecurityGroupRule>> {
        self.err("list_security_group_rules")
    }
    async fn create_security_group_rule(
        &self,
        _: &SecurityGroupRuleCreate,
    ) -> Result<SecurityGroupRule> {
        self.err("create_security_group_rule")
    }
    async fn create_security_group_rules(
        &self,
        _: &[SecurityGroupRuleCreate],
    ) -> Result<Vec<SecurityGroupRule>> {
        self.err("create_security_group_rules")
    }
    async fn delete_security_group_rule(&self, _: &str) -> Result<()> {
        self.err("delete_security_group_rule")
    }
    async fn set_tags(&self, _: TaggedResource, _: &str, _: &[String]) -> Result<()> {
        self.err("set_tags")
    }
    async fn get_network_quota(&self, _: &str) -> Result<QuotaSet> {
        self.err("get_network_quota")
    }
    async fn update_network_quota(&self, _: &str, _: &BTreeMap<String, i64>) -> Result<()> {
        self.err("update_network_quota")
    }
    async fn get_network_quota_defaults(&self, _: &str) -> Result<QuotaUpdate> {
        self.err("get_network_quota_defaults")
    }
}
