"""A food delivery platform's support desk: customers, restaurants, menus, orders, promo codes and refunds."""

from typing import TypedDict

EDITABLE_STATUSES = ("placed",)
BEFORE_PICKUP_STATUSES = ("placed", "preparing")
PAYMENT_METHODS = ("card", "wallet")
MAX_QUANTITY = 20


class AddressInfo(TypedDict):
    street: str
    zone: str


class CustomerInfo(TypedDict):
    customer_id: str
    name: str
    email: str
    phone: str
    addresses: dict[str, AddressInfo]  # label -> address
    wallet_balance: float


class RestaurantInfo(TypedDict):
    restaurant_id: str
    name: str
    cuisine: str
    is_open: bool
    delivery_zones: list[str]
    min_order_amount: float
    delivery_fee: float


class MenuItemInfo(TypedDict):
    item_id: str
    restaurant_id: str
    name: str
    price: float
    available: bool


class OrderLine(TypedDict):
    item_id: str
    name: str
    quantity: int
    unit_price: float


class OrderInfo(TypedDict):
    order_id: str
    customer_id: str
    restaurant_id: str
    items: list[OrderLine]
    subtotal: float
    discount: float
    delivery_fee: float
    total: float
    status: str  # "placed" | "preparing" | "picked_up" | "delivered" | "cancelled"
    delivery_address: dict
    payment_method: str  # "card" | "wallet"
    promo_code: str
    instructions: str


class PromoCodeInfo(TypedDict):
    code: str
    percent_off: int
    min_subtotal: float
    valid_until: str
    active: bool
    single_use: bool
    used_by: list[str]


class RefundInfo(TypedDict):
    refund_id: str
    order_id: str
    amount: float
    destination: str  # "card" | "wallet"
    reason: str
    item_id: str


class FoodDelivery:
    def __init__(self, init_config: dict):
        """Create the platform's records from the initial configuration."""
        self.current_date: str = init_config.get("current_date", "2026-07-14")
        self.customers: dict[str, CustomerInfo] = init_config.get("customers", {})
        self.restaurants: dict[str, RestaurantInfo] = init_config.get("restaurants", {})
        self.menu_items: dict[str, MenuItemInfo] = init_config.get("menu_items", {})
        self.orders: dict[str, OrderInfo] = init_config.get("orders", {})
        self.promo_codes: dict[str, PromoCodeInfo] = init_config.get("promo_codes", {})
        self.refunds: dict[str, RefundInfo] = init_config.get("refunds", {})
        self.next_order_number: int = init_config.get("next_order_number", 1)
        self.next_refund_number: int = init_config.get("next_refund_number", 1)

    # ------------------------------------------------------------------ helpers

    def _build_lines(self, restaurant_id: str, items: dict) -> tuple[list[OrderLine], str]:
        """Order lines for {item_id: quantity}, or an error message."""
        if not isinstance(items, dict) or not items:
            return [], "Give the items as a non-empty mapping of menu item id to quantity."
        lines: list[OrderLine] = []
        for item_id, quantity in items.items():
            item = self.menu_items.get(item_id)
            if item is None or item["restaurant_id"] != restaurant_id:
                return [], f"Item {item_id} is not on this restaurant's menu."
            if not item["available"]:
                return [], f"{item['name']} is not available right now."
            if not isinstance(quantity, int) or isinstance(quantity, bool) or not 1 <= quantity <= MAX_QUANTITY:
                return [], f"Quantity of {item['name']} must be a whole number from 1 to {MAX_QUANTITY}."
            lines.append({"item_id": item_id, "name": item["name"], "quantity": quantity, "unit_price": item["price"]})
        return lines, ""

    def _promo_error(self, code: str, customer_id: str, subtotal: float) -> str:
        promo = self.promo_codes.get(code)
        if promo is None or not promo["active"]:
            return f"Promo code {code} is not valid."
        if promo["valid_until"] < self.current_date:
            return f"Promo code {code} expired on {promo['valid_until']}."
        if subtotal < promo["min_subtotal"]:
            return f"Promo code {code} needs a subtotal of at least {promo['min_subtotal']:.2f}."
        if promo["single_use"] and customer_id in promo["used_by"]:
            return f"Promo code {code} has already been used by this customer."
        return ""

    def _totals(self, lines: list[OrderLine], promo_code: str, delivery_fee: float) -> tuple[float, float, float]:
        subtotal = round(sum(line["unit_price"] * line["quantity"] for line in lines), 2)
        discount = 0.0
        if promo_code:
            discount = round(subtotal * self.promo_codes[promo_code]["percent_off"] / 100, 2)
        return subtotal, discount, round(subtotal - discount + delivery_fee, 2)

    # ------------------------------------------------------------------ queries

    def find_customers(self, name: str = "", email: str = "") -> dict:
        """Search customer accounts by (part of) the name or by exact email address.

        Args:
            name: Part of the customer's name, case-insensitive.
            email: The customer's email address.
        """
        if not name and not email:
            return {"success": False, "error": "Give a name or an email to search for."}
        matches = [
            c
            for c in self.customers.values()
            if (not name or name.lower() in c["name"].lower()) and (not email or email.lower() == c["email"].lower())
        ]
        return {"success": True, "data": matches}

    def get_customer(self, customer_id: str) -> dict:
        """Get one customer account, including saved addresses and wallet balance.

        Args:
            customer_id: The customer's id, e.g. "C-301".
        """
        customer = self.customers.get(customer_id)
        if customer is None:
            return {"success": False, "error": f"No customer with id {customer_id}."}
        return {"success": True, "data": customer}

    def search_restaurants(self, name: str = "", cuisine: str = "") -> dict:
        """Search restaurants by (part of) the name and/or cuisine.

        Args:
            name: Part of the restaurant's name, case-insensitive.
            cuisine: A cuisine such as "pizza" or "thai", case-insensitive.
        """
        matches = [
            r
            for r in self.restaurants.values()
            if (not name or name.lower() in r["name"].lower())
            and (not cuisine or cuisine.lower() == r["cuisine"].lower())
        ]
        return {"success": True, "data": matches}

    def get_menu(self, restaurant_id: str) -> dict:
        """List a restaurant's menu items with prices and availability.

        Args:
            restaurant_id: The restaurant's id, e.g. "R-11".
        """
        if restaurant_id not in self.restaurants:
            return {"success": False, "error": f"No restaurant with id {restaurant_id}."}
        return {
            "success": True,
            "data": [m for m in self.menu_items.values() if m["restaurant_id"] == restaurant_id],
        }

    def get_order(self, order_id: str) -> dict:
        """Get one order.

        Args:
            order_id: The order's id, e.g. "O-7001".
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"No order with id {order_id}."}
        return {"success": True, "data": order}

    def list_customer_orders(self, customer_id: str, status: str = "") -> dict:
        """List a customer's orders, optionally only those with one status.

        Args:
            customer_id: The customer's id.
            status: "placed", "preparing", "picked_up", "delivered" or "cancelled"; empty for all.
        """
        if customer_id not in self.customers:
            return {"success": False, "error": f"No customer with id {customer_id}."}
        return {
            "success": True,
            "data": [
                o
                for o in self.orders.values()
                if o["customer_id"] == customer_id and (not status or o["status"] == status)
            ],
        }

    def get_promo_code(self, code: str) -> dict:
        """Look up a promo code's terms.

        Args:
            code: The promo code, e.g. "SUMMER10".
        """
        promo = self.promo_codes.get(code)
        if promo is None:
            return {"success": False, "error": f"Promo code {code} does not exist."}
        terms = {k: v for k, v in promo.items() if k != "used_by"}
        return {"success": True, "data": terms}

    def list_refunds(self, order_id: str) -> dict:
        """List the refunds issued for an order.

        Args:
            order_id: The order's id.
        """
        if order_id not in self.orders:
            return {"success": False, "error": f"No order with id {order_id}."}
        return {"success": True, "data": [r for r in self.refunds.values() if r["order_id"] == order_id]}

    # ------------------------------------------------------------------ changes

    def place_order(
        self,
        customer_id: str,
        restaurant_id: str,
        items: dict,
        address_label: str,
        payment_method: str,
        promo_code: str = "",
    ) -> dict:
        """Place a new order for delivery to one of the customer's saved addresses.

        Args:
            customer_id: The customer's id.
            restaurant_id: The restaurant to order from.
            items: Mapping of menu item id to quantity, e.g. {"M-101": 2}.
            address_label: The label of a saved address of the customer, e.g. "home".
            payment_method: "card" or "wallet" (wallet needs enough balance; it is charged at once).
            promo_code: A promo code to apply (optional).
        """
        customer = self.customers.get(customer_id)
        if customer is None:
            return {"success": False, "error": f"No customer with id {customer_id}."}
        restaurant = self.restaurants.get(restaurant_id)
        if restaurant is None:
            return {"success": False, "error": f"No restaurant with id {restaurant_id}."}
        if not restaurant["is_open"]:
            return {"success": False, "error": f"{restaurant['name']} is closed right now."}
        address = customer["addresses"].get(address_label)
        if address is None:
            return {"success": False, "error": f"The customer has no saved address called {address_label!r}."}
        if address["zone"] not in restaurant["delivery_zones"]:
            return {
                "success": False,
                "error": f"{restaurant['name']} does not deliver to zone {address['zone']}.",
            }
        if payment_method not in PAYMENT_METHODS:
            return {"success": False, "error": "payment_method must be 'card' or 'wallet'."}
        lines, problem = self._build_lines(restaurant_id, items)
        if problem:
            return {"success": False, "error": problem}
        subtotal = round(sum(line["unit_price"] * line["quantity"] for line in lines), 2)
        if subtotal < restaurant["min_order_amount"]:
            return {
                "success": False,
                "error": f"The minimum order here is {restaurant['min_order_amount']:.2f}.",
            }
        if promo_code:
            problem = self._promo_error(promo_code, customer_id, subtotal)
            if problem:
                return {"success": False, "error": problem}
        subtotal, discount, total = self._totals(lines, promo_code, restaurant["delivery_fee"])
        if payment_method == "wallet" and customer["wallet_balance"] < total:
            return {"success": False, "error": f"The wallet balance does not cover the total of {total:.2f}."}
        if payment_method == "wallet":
            customer["wallet_balance"] = round(customer["wallet_balance"] - total, 2)
        if promo_code:
            self.promo_codes[promo_code]["used_by"].append(customer_id)
        order_id = f"O-{self.next_order_number}"
        self.next_order_number += 1
        self.orders[order_id] = {
            "order_id": order_id,
            "customer_id": customer_id,
            "restaurant_id": restaurant_id,
            "items": lines,
            "subtotal": subtotal,
            "discount": discount,
            "delivery_fee": restaurant["delivery_fee"],
            "total": total,
            "status": "placed",
            "delivery_address": {
                "label": address_label,
                "street": address["street"],
                "zone": address["zone"],
            },
            "payment_method": payment_method,
            "promo_code": promo_code,
            "instructions": "",
        }
        return {"success": True, "data": self.orders[order_id]}

    def modify_order_items(self, order_id: str, items: dict) -> dict:
        """Replace the items of an order that the restaurant has not started preparing.

        Args:
            order_id: The order to change.
            items: The complete new mapping of menu item id to quantity.
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"No order with id {order_id}."}
        if order["status"] not in EDITABLE_STATUSES:
            return {
                "success": False,
                "error": f"Order {order_id} is {order['status']}; items can no longer change.",
            }
        restaurant = self.restaurants[order["restaurant_id"]]
        lines, problem = self._build_lines(order["restaurant_id"], items)
        if problem:
            return {"success": False, "error": problem}
        subtotal, discount, total = self._totals(lines, order["promo_code"], order["delivery_fee"])
        if subtotal < restaurant["min_order_amount"]:
            return {
                "success": False,
                "error": f"The minimum order here is {restaurant['min_order_amount']:.2f}.",
            }
        if order["promo_code"] and subtotal < self.promo_codes[order["promo_code"]]["min_subtotal"]:
            return {
                "success": False,
                "error": f"The new subtotal is below the minimum of {order['promo_code']}.",
            }
        customer = self.customers[order["customer_id"]]
        difference = round(total - order["total"], 2)
        if order["payment_method"] == "wallet":
            if customer["wallet_balance"] < difference:
                return {"success": False, "error": "The wallet balance does not cover the higher total."}
            customer["wallet_balance"] = round(customer["wallet_balance"] - difference, 2)
        order["items"] = lines
        order["subtotal"] = subtotal
        order["discount"] = discount
        order["total"] = total
        return {"success": True, "data": order}

    def apply_promo_code(self, order_id: str, code: str) -> dict:
        """Apply a promo code to an order that has no promo code yet and is not being prepared yet.

        Args:
            order_id: The order.
            code: The promo code.
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"No order with id {order_id}."}
        if order["status"] not in EDITABLE_STATUSES:
            return {
                "success": False,
                "error": f"Order {order_id} is {order['status']}; promo codes cannot be added.",
            }
        if order["promo_code"]:
            return {
                "success": False,
                "error": f"Order {order_id} already uses promo code {order['promo_code']}.",
            }
        problem = self._promo_error(code, order["customer_id"], order["subtotal"])
        if problem:
            return {"success": False, "error": problem}
        _, discount, total = self._totals(order["items"], code, order["delivery_fee"])
        if order["payment_method"] == "wallet":
            customer = self.customers[order["customer_id"]]
            customer["wallet_balance"] = round(customer["wallet_balance"] + order["total"] - total, 2)
        self.promo_codes[code]["used_by"].append(order["customer_id"])
        order["promo_code"] = code
        order["discount"] = discount
        order["total"] = total
        return {"success": True, "data": order}

    def change_delivery_address(self, order_id: str, address_label: str) -> dict:
        """Send an order to another of the customer's saved addresses, until a courier picks it up.

        Args:
            order_id: The order.
            address_label: The label of a saved address of the customer.
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"No order with id {order_id}."}
        if order["status"] not in BEFORE_PICKUP_STATUSES:
            return {
                "success": False,
                "error": f"Order {order_id} is {order['status']}; the address is final.",
            }
        address = self.customers[order["customer_id"]]["addresses"].get(address_label)
        if address is None:
            return {"success": False, "error": f"The customer has no saved address called {address_label!r}."}
        restaurant = self.restaurants[order["restaurant_id"]]
        if address["zone"] not in restaurant["delivery_zones"]:
            return {
                "success": False,
                "error": f"{restaurant['name']} does not deliver to zone {address['zone']}.",
            }
        order["delivery_address"] = {
            "label": address_label,
            "street": address["street"],
            "zone": address["zone"],
        }
        return {"success": True, "data": order}

    def add_delivery_instructions(self, order_id: str, instructions: str) -> dict:
        """Set the courier instructions of an order (e.g. "ring twice"), until a courier picks it up.

        Args:
            order_id: The order.
            instructions: The instructions for the courier.
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"No order with id {order_id}."}
        if order["status"] not in BEFORE_PICKUP_STATUSES:
            return {
                "success": False,
                "error": f"Order {order_id} is {order['status']}; instructions are final.",
            }
        if not instructions.strip():
            return {"success": False, "error": "The instructions are empty."}
        order["instructions"] = instructions.strip()
        return {"success": True, "data": order}

    def cancel_order(self, order_id: str, reason: str = "") -> dict:
        """Cancel an order before a courier picks it up; the total is refunded to the original payment method.

        Args:
            order_id: The order to cancel.
            reason: Why the customer cancels.
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"No order with id {order_id}."}
        if order["status"] not in BEFORE_PICKUP_STATUSES:
            return {
                "success": False,
                "error": f"Order {order_id} is {order['status']} and cannot be cancelled.",
            }
        order["status"] = "cancelled"
        if order["payment_method"] == "wallet":
            customer = self.customers[order["customer_id"]]
            customer["wallet_balance"] = round(customer["wallet_balance"] + order["total"], 2)
        refund_id = f"RFD-{self.next_refund_number}"
        self.next_refund_number += 1
        self.refunds[refund_id] = {
            "refund_id": refund_id,
            "order_id": order_id,
            "amount": order["total"],
            "destination": order["payment_method"],
            "reason": reason or "order cancelled",
            "item_id": "",
        }
        return {"success": True, "data": {"order_id": order_id, "refund": self.refunds[refund_id]}}

    def report_missing_item(self, order_id: str, item_id: str, quantity: int) -> dict:
        """Refund items missing from a delivered order, at the price paid, to the original payment method.

        Args:
            order_id: The delivered order.
            item_id: The menu item that was missing.
            quantity: How many of that item were missing.
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"No order with id {order_id}."}
        if order["status"] != "delivered":
            return {"success": False, "error": "Missing items can only be reported for delivered orders."}
        line = next((x for x in order["items"] if x["item_id"] == item_id), None)
        if line is None:
            return {"success": False, "error": f"Item {item_id} is not part of order {order_id}."}
        if any(r["order_id"] == order_id and r["item_id"] == item_id for r in self.refunds.values()):
            return {"success": False, "error": "A missing-item refund for this item was already issued."}
        if quantity < 1 or quantity > line["quantity"]:
            return {"success": False, "error": f"Quantity must be between 1 and {line['quantity']}."}
        share = 1 - (order["discount"] / order["subtotal"] if order["subtotal"] else 0)
        amount = round(line["unit_price"] * quantity * share, 2)
        if order["payment_method"] == "wallet":
            customer = self.customers[order["customer_id"]]
            customer["wallet_balance"] = round(customer["wallet_balance"] + amount, 2)
        refund_id = f"RFD-{self.next_refund_number}"
        self.next_refund_number += 1
        self.refunds[refund_id] = {
            "refund_id": refund_id,
            "order_id": order_id,
            "amount": amount,
            "destination": order["payment_method"],
            "reason": f"missing item: {line['name']} x{quantity}",
            "item_id": item_id,
        }
        return {"success": True, "data": self.refunds[refund_id]}

    def add_customer_address(self, customer_id: str, label: str, street: str, zone: str) -> dict:
        """Save a new delivery address on a customer's account.

        Args:
            customer_id: The customer's id.
            label: A short unique label for the address, e.g. "office".
            street: Street and number.
            zone: The delivery zone code, e.g. "Z2".
        """
        customer = self.customers.get(customer_id)
        if customer is None:
            return {"success": False, "error": f"No customer with id {customer_id}."}
        if not label.strip() or not street.strip() or not zone.strip():
            return {"success": False, "error": "Label, street and zone are all required."}
        if label in customer["addresses"]:
            return {"success": False, "error": f"The customer already has an address called {label!r}."}
        customer["addresses"][label] = {"street": street.strip(), "zone": zone.strip()}
        return {"success": True, "data": customer}
