-- One audit row per status transition, and the deal-timeline entry written for the
-- domain event BookingExpired (its subscriber in the CRM is the deal timeline).
CREATE TABLE IF NOT EXISTS crm.booking_audit (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    booking_id  uuid        NOT NULL,
    tenant_id   uuid        NOT NULL,
    from_status text        NOT NULL,
    to_status   text        NOT NULL,
    version     integer     NOT NULL,   -- the booking's version after the transition
    actor       text        NOT NULL,
    run_id      uuid        NULL,       -- correlation id of the run that made it
    at          timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS ix_booking_audit_booking_id ON crm.booking_audit (booking_id);

CREATE TABLE IF NOT EXISTS crm.deal_timeline (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    deal_id        uuid        NOT NULL,
    tenant_id      uuid        NOT NULL,
    booking_id     uuid        NOT NULL,
    kind           text        NOT NULL,  -- 'BookingReserveExpired' | 'BookingExpired'
    occurred_at    timestamptz NOT NULL,
    correlation_id uuid        NULL,
    details        jsonb       NOT NULL DEFAULT '{}'::jsonb
);

CREATE INDEX IF NOT EXISTS ix_deal_timeline_deal_id ON crm.deal_timeline (deal_id, occurred_at);
