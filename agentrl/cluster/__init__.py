"""The Ray and process-group plumbing under the roles: joining, placement, worker groups, role calls."""
