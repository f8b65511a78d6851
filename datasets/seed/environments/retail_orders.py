"""Retail orders and returns: customers, a product catalog, orders, payment methods, returns and refunds."""

from datetime import date
from typing import TypedDict


class PaymentMethodInfo(TypedDict):
    payment_method_id: str
    user_id: str
    kind: str  # "credit_card" | "paypal" | "gift_card"
    label: str
    balance: float  # meaningful for gift cards only


class OrderItem(TypedDict):
    product_id: str
    name: str
    quantity: int
    unit_price: float
    returned_quantity: int


class OrderInfo(TypedDict):
    order_id: str
    user_id: str
    status: str  # "pending" | "processing" | "shipped" | "delivered" | "cancelled"
    items: list
    total: float
    payment_method_id: str
    shipping_address: str
    order_date: str
    delivered_date: str | None


RETURN_WINDOW_DAYS = 30
CANCELLABLE_STATUSES = ("pending", "processing")


class RetailOrders:
    def __init__(self, init_config: dict):
        """Create the state containers from the initial configuration."""
        self.current_date: str = init_config.get("current_date", "2025-01-01")
        self.users: dict[str, dict] = init_config.get("users", {})
        self.products: dict[str, dict] = init_config.get("products", {})
        self.payment_methods: dict[str, PaymentMethodInfo] = init_config.get("payment_methods", {})
        self.orders: dict[str, OrderInfo] = init_config.get("orders", {})
        self.returns: dict[str, dict] = init_config.get("returns", {})
        self.refunds: dict[str, dict] = init_config.get("refunds", {})

    # ------------------------------------------------------------------ helpers

    def _next_id(self, prefix: str, existing: dict) -> str:
        number = len(existing) + 1
        while f"{prefix}-{number}" in existing:
            number += 1
        return f"{prefix}-{number}"

    def _record_refund(self, order_id: str, payment_method_id: str, amount: float, reason: str) -> str:
        refund_id = self._next_id("RF", self.refunds)
        self.refunds[refund_id] = {
            "refund_id": refund_id,
            "order_id": order_id,
            "payment_method_id": payment_method_id,
            "amount": round(amount, 2),
            "reason": reason,
            "date": self.current_date,
        }
        method = self.payment_methods.get(payment_method_id)
        if method is not None and method["kind"] == "gift_card":
            method["balance"] = round(method["balance"] + amount, 2)
        return refund_id

    # ------------------------------------------------------------------ queries

    def find_user_by_email(self, email: str) -> dict:
        """Find a customer account by its email address (case-insensitive).

        Args:
            email: The customer's email address.
        """
        wanted = email.strip().lower()
        for user in self.users.values():
            if user["email"].lower() == wanted:
                return {"success": True, "data": user}
        return {"success": False, "error": f"No customer with email {email}."}

    def find_users_by_name(self, name: str) -> dict:
        """List customers whose full name contains the given text (case-insensitive).

        Args:
            name: Full or partial customer name.
        """
        wanted = name.strip().lower()
        matches = [u for u in self.users.values() if wanted in u["name"].lower()]
        if not matches:
            return {"success": False, "error": f"No customer named like {name}."}
        return {"success": True, "data": matches}

    def get_user_details(self, user_id: str) -> dict:
        """Get a customer's profile: name, email, default address.

        Args:
            user_id: The customer's id, e.g. "U-100".
        """
        user = self.users.get(user_id)
        if user is None:
            return {"success": False, "error": f"No customer with id {user_id}."}
        return {"success": True, "data": user}

    def list_user_orders(self, user_id: str) -> dict:
        """List all orders of a customer with their status, date and total.

        Args:
            user_id: The customer's id.
        """
        if user_id not in self.users:
            return {"success": False, "error": f"No customer with id {user_id}."}
        summary = [
            {
                "order_id": o["order_id"],
                "status": o["status"],
                "order_date": o["order_date"],
                "total": o["total"],
                "item_names": [item["name"] for item in o["items"]],
            }
            for o in self.orders.values()
            if o["user_id"] == user_id
        ]
        return {"success": True, "data": summary}

    def get_order_details(self, order_id: str) -> dict:
        """Look up one order by its id, with items, payment method and shipping address.

        Args:
            order_id: The order's id, e.g. "O-1001".
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"No order with id {order_id}."}
        return {"success": True, "data": order}

    def list_payment_methods(self, user_id: str) -> dict:
        """List the payment methods saved on a customer's account.

        Args:
            user_id: The customer's id.
        """
        if user_id not in self.users:
            return {"success": False, "error": f"No customer with id {user_id}."}
        methods = [m for m in self.payment_methods.values() if m["user_id"] == user_id]
        return {"success": True, "data": methods}

    def search_products(self, query: str) -> dict:
        """Search the catalog by product name or category (case-insensitive substring).

        Args:
            query: Text to look for in product names and categories.
        """
        wanted = query.strip().lower()
        matches = [p for p in self.products.values() if wanted in p["name"].lower() or wanted in p["category"].lower()]
        return {"success": True, "data": matches}

    def get_product(self, product_id: str) -> dict:
        """Get one product's details: name, category, price and stock.

        Args:
            product_id: The product's id, e.g. "P-200".
        """
        product = self.products.get(product_id)
        if product is None:
            return {"success": False, "error": f"No product with id {product_id}."}
        return {"success": True, "data": product}

    def get_return(self, return_id: str) -> dict:
        """Look up a return request by its id.

        Args:
            return_id: The return's id, e.g. "R-1".
        """
        record = self.returns.get(return_id)
        if record is None:
            return {"success": False, "error": f"No return with id {return_id}."}
        return {"success": True, "data": record}

    # ------------------------------------------------------------------ state changes

    def cancel_order(self, order_id: str, reason: str) -> dict:
        """Cancel an order that has not shipped yet; items are restocked and the total is refunded.

        The refund always goes to the order's original payment method.

        Args:
            order_id: The order to cancel.
            reason: Why the customer cancels, e.g. "ordered by mistake" or "no longer needed".
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"No order with id {order_id}."}
        if order["status"] not in CANCELLABLE_STATUSES:
            return {
                "success": False,
                "error": f"Order {order_id} is {order['status']}; only pending or processing orders can be cancelled.",
            }
        if not reason.strip():
            return {"success": False, "error": "A cancellation reason is required."}
        for item in order["items"]:
            product = self.products.get(item["product_id"])
            if product is not None:
                product["stock"] += item["quantity"]
        order["status"] = "cancelled"
        order["cancel_reason"] = reason.strip()
        refund_id = self._record_refund(order_id, order["payment_method_id"], order["total"], "cancellation")
        return {
            "success": True,
            "message": f"Order {order_id} cancelled; {order['total']:.2f} refunded as {refund_id} to "
            f"{order['payment_method_id']}.",
        }

    def update_order_shipping_address(self, order_id: str, address: str) -> dict:
        """Change where an order will be shipped; only possible before it ships.

        Args:
            order_id: The order to change.
            address: The full new shipping address.
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"No order with id {order_id}."}
        if order["status"] not in CANCELLABLE_STATUSES:
            return {
                "success": False,
                "error": f"Order {order_id} is {order['status']}; the address is fixed once shipped.",
            }
        if not address.strip():
            return {"success": False, "error": "The address must not be empty."}
        order["shipping_address"] = address.strip()
        return {"success": True, "message": f"Order {order_id} will ship to {address.strip()}."}

    def update_default_address(self, user_id: str, address: str) -> dict:
        """Change the default address saved on a customer's profile (existing orders are not affected).

        Args:
            user_id: The customer's id.
            address: The full new default address.
        """
        user = self.users.get(user_id)
        if user is None:
            return {"success": False, "error": f"No customer with id {user_id}."}
        if not address.strip():
            return {"success": False, "error": "The address must not be empty."}
        user["default_address"] = address.strip()
        return {"success": True, "message": f"Default address of {user_id} updated."}

    def change_order_payment_method(self, order_id: str, payment_method_id: str) -> dict:
        """Switch the payment method of an order that has not shipped yet.

        The new method must belong to the same customer; a gift card must cover the whole total.

        Args:
            order_id: The order to change.
            payment_method_id: The customer's payment method to charge instead.
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"No order with id {order_id}."}
        if order["status"] not in CANCELLABLE_STATUSES:
            return {
                "success": False,
                "error": f"Order {order_id} is {order['status']}; payment cannot change.",
            }
        method = self.payment_methods.get(payment_method_id)
        if method is None or method["user_id"] != order["user_id"]:
            return {"success": False, "error": "That payment method does not belong to the order's customer."}
        if payment_method_id == order["payment_method_id"]:
            return {"success": False, "error": "The order already uses that payment method."}
        if method["kind"] == "gift_card" and method["balance"] < order["total"]:
            return {"success": False, "error": f"Gift card {payment_method_id} balance is too low."}
        old = self.payment_methods.get(order["payment_method_id"])
        if old is not None and old["kind"] == "gift_card":
            old["balance"] = round(old["balance"] + order["total"], 2)
        if method["kind"] == "gift_card":
            method["balance"] = round(method["balance"] - order["total"], 2)
        order["payment_method_id"] = payment_method_id
        return {"success": True, "message": f"Order {order_id} is now paid with {payment_method_id}."}

    def place_order(
        self, user_id: str, items: dict, payment_method_id: str, shipping_address: str | None = None
    ) -> dict:
        """Place a new order for a customer; it starts as pending.

        Args:
            user_id: The customer's id.
            items: Mapping of product id to quantity, e.g. {"P-200": 1}.
            payment_method_id: One of the customer's payment methods.
            shipping_address: Where to ship; the customer's default address when omitted.
        """
        user = self.users.get(user_id)
        if user is None:
            return {"success": False, "error": f"No customer with id {user_id}."}
        if not items:
            return {"success": False, "error": "An order needs at least one item."}
        method = self.payment_methods.get(payment_method_id)
        if method is None or method["user_id"] != user_id:
            return {"success": False, "error": "That payment method does not belong to this customer."}
        lines = []
        total = 0.0
        for product_id, quantity in items.items():
            product = self.products.get(product_id)
            if product is None:
                return {"success": False, "error": f"No product with id {product_id}."}
            whole = isinstance(quantity, int | float) and not isinstance(quantity, bool) and quantity == int(quantity)
            if not whole or quantity < 1:
                return {"success": False, "error": f"Quantity for {product_id} must be a positive integer."}
            quantity = int(quantity)
            if product["stock"] < quantity:
                return {"success": False, "error": f"Only {product['stock']} of {product_id} in stock."}
            lines.append(
                {
                    "product_id": product_id,
                    "name": product["name"],
                    "quantity": quantity,
                    "unit_price": product["price"],
                    "returned_quantity": 0,
                }
            )
            total += product["price"] * quantity
        total = round(total, 2)
        if method["kind"] == "gift_card" and method["balance"] < total:
            return {"success": False, "error": f"Gift card {payment_method_id} balance is too low."}
        for line in lines:
            self.products[line["product_id"]]["stock"] -= line["quantity"]
        if method["kind"] == "gift_card":
            method["balance"] = round(method["balance"] - total, 2)
        order_id = self._next_id("O", self.orders)
        self.orders[order_id] = {
            "order_id": order_id,
            "user_id": user_id,
            "status": "pending",
            "items": lines,
            "total": total,
            "payment_method_id": payment_method_id,
            "shipping_address": (shipping_address or user["default_address"]).strip(),
            "order_date": self.current_date,
            "delivered_date": None,
        }
        return {"success": True, "message": f"Order {order_id} placed, total {total:.2f}.", "data": order_id}

    def request_return(
        self, order_id: str, product_id: str, quantity: int, refund_payment_method_id: str, reason: str
    ) -> dict:
        """Return items of a delivered order and refund them.

        Returns are accepted within 30 days of delivery, for at most the quantity not yet returned, and the
        refund goes only to the order's original payment method.

        Args:
            order_id: The delivered order.
            product_id: The product to return.
            quantity: How many units to return.
            refund_payment_method_id: Where to send the refund; must be the order's original payment method.
            reason: Why the customer returns the item.
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"No order with id {order_id}."}
        if order["status"] != "delivered":
            return {
                "success": False,
                "error": f"Order {order_id} is {order['status']}; only delivered orders can be returned.",
            }
        delivered = date.fromisoformat(order["delivered_date"])
        if (date.fromisoformat(self.current_date) - delivered).days > RETURN_WINDOW_DAYS:
            return {
                "success": False,
                "error": f"Order {order_id} was delivered on {order['delivered_date']}; "
                f"the {RETURN_WINDOW_DAYS}-day return window has closed.",
            }
        if refund_payment_method_id != order["payment_method_id"]:
            return {
                "success": False,
                "error": f"Refunds can only go to the order's original payment method ({order['payment_method_id']}).",
            }
        line = next((item for item in order["items"] if item["product_id"] == product_id), None)
        if line is None:
            return {"success": False, "error": f"Order {order_id} has no item {product_id}."}
        returnable = line["quantity"] - line["returned_quantity"]
        if quantity < 1 or quantity > returnable:
            return {"success": False, "error": f"Only {returnable} unit(s) of {product_id} can be returned."}
        if not reason.strip():
            return {"success": False, "error": "A return reason is required."}
        amount = round(line["unit_price"] * quantity, 2)
        line["returned_quantity"] += quantity
        product = self.products.get(product_id)
        if product is not None:
            product["stock"] += quantity
        return_id = self._next_id("R", self.returns)
        refund_id = self._record_refund(order_id, refund_payment_method_id, amount, "return")
        self.returns[return_id] = {
            "return_id": return_id,
            "order_id": order_id,
            "product_id": product_id,
            "quantity": quantity,
            "refund_amount": amount,
            "refund_id": refund_id,
            "reason": reason.strip(),
            "date": self.current_date,
        }
        return {
            "success": True,
            "message": f"Return {return_id} accepted; {amount:.2f} refunded as {refund_id}.",
        }
