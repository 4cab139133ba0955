"""Calls the policy grants that the rest of the suite does not reach on its own, made here through
capa-py's code against moto (so the whole-suite IAM check sees them used, and they are known to work)."""

from __future__ import annotations

import json

from capa_app.audit.deleters import DELETERS
from capa_app.audit.model import AuditClass, AuditRow
from capa_app.iam.bootstrap import TRUST_POLICY, apply_steps, observe, plan_bootstrap
from capa_py.aws.session import AWSClients
from tests.iam.test_iam_bootstrap import NAMES, STORE


def test_the_audit_revokes_a_leaked_egress_rule(aws: AWSClients) -> None:
    ec2 = aws.ec2.raw
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    group = ec2.create_security_group(GroupName="debug", Description="debug", VpcId=vpc)["GroupId"]
    target = ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc)["GroupId"]
    added = ec2.authorize_security_group_egress(
        GroupId=group,
        IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "UserIdGroupPairs": [{"GroupId": target}]}
        ],
    )
    rule = added["SecurityGroupRules"][0]["SecurityGroupRuleId"]
    row = AuditRow.model_validate(
        {
            "region": "us-east-1",
            "kind": "security-group-rule",
            "id": rule,
            "class": AuditClass.UNTAGGED_IN_MANAGED_VPC,
            "reason": "test",
            "parent": group,
        }
    )
    row.attributes = {"is_egress": True, "group_id": group}
    DELETERS["security-group-rule"].start(aws, row)
    left = ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": [group]}])[
        "SecurityGroupRules"
    ]
    assert rule not in {r["SecurityGroupRuleId"] for r in left}


def test_bootstrap_puts_back_a_trust_policy_someone_changed(aws: AWSClients) -> None:
    apply_steps(aws, plan_bootstrap(aws, observe(aws), STORE))
    iam = aws.client("iam").raw
    changed = {**TRUST_POLICY, "Statement": [{**TRUST_POLICY["Statement"][0], "Principal": {"AWS": "*"}}]}
    iam.update_assume_role_policy(RoleName=NAMES[2], PolicyDocument=json.dumps(changed))
    steps = plan_bootstrap(aws, observe(aws), STORE)
    assert [(s.operation, s.target) for s in steps] == [("UpdateAssumeRolePolicy", NAMES[2])]
    apply_steps(aws, steps)
    document = iam.get_role(RoleName=NAMES[2])["Role"]["AssumeRolePolicyDocument"]
    assert (json.loads(document) if isinstance(document, str) else document) == TRUST_POLICY
    assert plan_bootstrap(aws, observe(aws), STORE) == []
