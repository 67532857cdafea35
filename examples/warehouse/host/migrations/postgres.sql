-- Stock per shelf and product, and the reservations made from it.
CREATE TABLE stock (
    tenant_id TEXT NOT NULL,
    shelf_id  TEXT NOT NULL,
    sku       TEXT NOT NULL,
    on_hand   BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, shelf_id, sku)
);

-- One row per business intent: the idempotency key is the primary key, so a
-- repeated request finds its reservation instead of making a second one.
CREATE TABLE reservations (
    tenant_id       TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    reservation_id  TEXT NOT NULL,
    shelf_id        TEXT NOT NULL,
    sku             TEXT NOT NULL,
    units           BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, idempotency_key)
);
