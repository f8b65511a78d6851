"""Retail banking: customers, accounts, transactions, payees and debit cards."""

from datetime import date
from typing import TypedDict


class AccountInfo(TypedDict):
    account_id: str
    customer_id: str
    kind: str  # "checking" | "savings"
    balance: float
    status: str  # "active" | "frozen" | "closed"


class TransactionInfo(TypedDict):
    transaction_id: str
    account_id: str
    kind: str  # "deposit" | "withdrawal" | "card_purchase" | "fee" | "fee_reversal" | "transfer_in" | ...
    amount: float  # positive adds to the balance, negative takes from it
    date: str
    description: str
    status: str  # "posted" | "disputed"


DAILY_PAYEE_LIMIT = 5000.0
DISPUTE_WINDOW_DAYS = 60
DISPUTABLE_KINDS = ("card_purchase", "withdrawal")


class Banking:
    def __init__(self, init_config: dict):
        """Create the state containers from the initial configuration."""
        self.current_date: str = init_config.get("current_date", "2025-01-01")
        self.customers: dict[str, dict] = init_config.get("customers", {})
        self.accounts: dict[str, AccountInfo] = init_config.get("accounts", {})
        self.transactions: dict[str, TransactionInfo] = init_config.get("transactions", {})
        self.payees: dict[str, dict] = init_config.get("payees", {})
        self.cards: dict[str, dict] = init_config.get("cards", {})

    # ------------------------------------------------------------------ helpers

    def _next_id(self, prefix: str, existing: dict) -> str:
        number = len(existing) + 1
        while f"{prefix}-{number:05d}" in existing:
            number += 1
        return f"{prefix}-{number:05d}"

    def _post(self, account_id: str, kind: str, amount: float, description: str, related: str | None) -> str:
        transaction_id = self._next_id("T", self.transactions)
        self.transactions[transaction_id] = {
            "transaction_id": transaction_id,
            "account_id": account_id,
            "kind": kind,
            "amount": round(amount, 2),
            "date": self.current_date,
            "description": description,
            "status": "posted",
            "related_id": related,
        }
        account = self.accounts[account_id]
        account["balance"] = round(account["balance"] + amount, 2)
        return transaction_id

    def _active_account(self, account_id: str) -> tuple:
        account = self.accounts.get(account_id)
        if account is None:
            return None, {"success": False, "error": f"No account with id {account_id}."}
        if account["status"] != "active":
            return None, {
                "success": False,
                "error": f"Account {account_id} is {account['status']}; it cannot send or receive money.",
            }
        return account, None

    def _paid_to_payees_today(self, customer_id: str) -> float:
        total = 0.0
        for txn in self.transactions.values():
            account = self.accounts.get(txn["account_id"])
            if (
                account is not None
                and account["customer_id"] == customer_id
                and txn["kind"] == "payee_payment"
                and txn["date"] == self.current_date
            ):
                total += -txn["amount"]
        return round(total, 2)

    # ------------------------------------------------------------------ queries

    def find_customer_by_email(self, email: str) -> dict:
        """Find a bank customer by email address (case-insensitive).

        Args:
            email: The customer's email address.
        """
        wanted = email.strip().lower()
        for customer in self.customers.values():
            if customer["email"].lower() == wanted:
                return {"success": True, "data": customer}
        return {"success": False, "error": f"No customer with email {email}."}

    def find_customers_by_name(self, name: str) -> dict:
        """List customers whose name contains the given text (case-insensitive).

        Args:
            name: Full or partial name.
        """
        wanted = name.strip().lower()
        matches = [c for c in self.customers.values() if wanted in c["name"].lower()]
        if not matches:
            return {"success": False, "error": f"No customer named like {name}."}
        return {"success": True, "data": matches}

    def get_customer(self, customer_id: str) -> dict:
        """Get a customer's profile.

        Args:
            customer_id: The customer's id, e.g. "CU-01".
        """
        customer = self.customers.get(customer_id)
        if customer is None:
            return {"success": False, "error": f"No customer with id {customer_id}."}
        return {"success": True, "data": customer}

    def list_accounts(self, customer_id: str) -> dict:
        """List a customer's accounts with type, balance and status.

        Args:
            customer_id: The customer's id.
        """
        if customer_id not in self.customers:
            return {"success": False, "error": f"No customer with id {customer_id}."}
        return {
            "success": True,
            "data": [a for a in self.accounts.values() if a["customer_id"] == customer_id],
        }

    def get_account(self, account_id: str) -> dict:
        """Get one account's details.

        Args:
            account_id: The account's id, e.g. "AC-1001".
        """
        account = self.accounts.get(account_id)
        if account is None:
            return {"success": False, "error": f"No account with id {account_id}."}
        return {"success": True, "data": account}

    def list_transactions(self, account_id: str, kind: str | None = None) -> dict:
        """List an account's transactions, newest first.

        Args:
            account_id: The account.
            kind: Only this kind, e.g. "fee" or "card_purchase" (optional).
        """
        if account_id not in self.accounts:
            return {"success": False, "error": f"No account with id {account_id}."}
        found = [
            t
            for t in self.transactions.values()
            if t["account_id"] == account_id and (kind is None or t["kind"] == kind)
        ]
        found.sort(key=lambda t: (t["date"], t["transaction_id"]), reverse=True)
        return {"success": True, "data": found}

    def list_payees(self, customer_id: str) -> dict:
        """List the payees a customer has registered for outgoing payments.

        Args:
            customer_id: The customer's id.
        """
        if customer_id not in self.customers:
            return {"success": False, "error": f"No customer with id {customer_id}."}
        return {"success": True, "data": [p for p in self.payees.values() if p["customer_id"] == customer_id]}

    def list_cards(self, customer_id: str) -> dict:
        """List the debit cards linked to a customer's accounts.

        Args:
            customer_id: The customer's id.
        """
        if customer_id not in self.customers:
            return {"success": False, "error": f"No customer with id {customer_id}."}
        owned = {a["account_id"] for a in self.accounts.values() if a["customer_id"] == customer_id}
        return {"success": True, "data": [c for c in self.cards.values() if c["account_id"] in owned]}

    # ------------------------------------------------------------------ state changes

    def transfer_between_accounts(self, from_account_id: str, to_account_id: str, amount: float) -> dict:
        """Move money between two accounts of the same customer. Overdrafts are not allowed.

        Args:
            from_account_id: The account to take the money from.
            to_account_id: The account to put it in (same customer).
            amount: Amount to move, greater than zero.
        """
        source, error = self._active_account(from_account_id)
        if error is not None:
            return error
        target, error = self._active_account(to_account_id)
        if error is not None:
            return error
        if from_account_id == to_account_id:
            return {"success": False, "error": "Source and destination must differ."}
        if source["customer_id"] != target["customer_id"]:
            return {
                "success": False,
                "error": "Transfers are only allowed between the same customer's accounts; "
                "use a payee payment instead.",
            }
        if amount <= 0:
            return {"success": False, "error": "The amount must be greater than zero."}
        if amount > source["balance"]:
            return {
                "success": False,
                "error": f"Insufficient funds: {from_account_id} holds "
                f"{source['balance']:.2f}; overdrafts are not allowed.",
            }
        out_id = self._post(from_account_id, "transfer_out", -amount, f"Transfer to {to_account_id}", None)
        in_id = self._post(to_account_id, "transfer_in", amount, f"Transfer from {from_account_id}", out_id)
        self.transactions[out_id]["related_id"] = in_id
        return {"success": True, "message": f"Moved {amount:.2f} from {from_account_id} to {to_account_id}."}

    def add_payee(self, customer_id: str, name: str, account_number: str) -> dict:
        """Register a payee (someone the customer can pay) on a customer's profile.

        Args:
            customer_id: The customer's id.
            name: The payee's name.
            account_number: The payee's bank account number.
        """
        if customer_id not in self.customers:
            return {"success": False, "error": f"No customer with id {customer_id}."}
        if not name.strip() or not account_number.strip():
            return {"success": False, "error": "Name and account number are required."}
        for payee in self.payees.values():
            if payee["customer_id"] == customer_id and payee["account_number"] == account_number.strip():
                return {
                    "success": False,
                    "error": f"Payee {payee['payee_id']} already has that account number.",
                }
        payee_id = self._next_id("PY", self.payees)
        self.payees[payee_id] = {
            "payee_id": payee_id,
            "customer_id": customer_id,
            "name": name.strip(),
            "account_number": account_number.strip(),
        }
        return {"success": True, "message": f"Payee {payee_id} added.", "data": payee_id}

    def pay_payee(self, account_id: str, payee_id: str, amount: float, memo: str | None = None) -> dict:
        """Pay a registered payee from a checking account.

        Savings accounts cannot pay payees, overdrafts are not allowed, and payee payments are limited to
        5,000.00 per customer per day.

        Args:
            account_id: The checking account to pay from.
            payee_id: One of the account owner's payees.
            amount: Amount to pay, greater than zero.
            memo: Note shown on the payment (optional).
        """
        account, error = self._active_account(account_id)
        if error is not None:
            return error
        payee = self.payees.get(payee_id)
        if payee is None or payee["customer_id"] != account["customer_id"]:
            return {"success": False, "error": f"Payee {payee_id} is not registered for this customer."}
        if account["kind"] != "checking":
            return {"success": False, "error": "Payee payments can only be made from a checking account."}
        if amount <= 0:
            return {"success": False, "error": "The amount must be greater than zero."}
        if amount > account["balance"]:
            return {
                "success": False,
                "error": f"Insufficient funds: {account_id} holds {account['balance']:.2f}; "
                "overdrafts are not allowed.",
            }
        already = self._paid_to_payees_today(account["customer_id"])
        if already + amount > DAILY_PAYEE_LIMIT:
            return {
                "success": False,
                "error": f"Daily payee limit {DAILY_PAYEE_LIMIT:.2f} exceeded ({already:.2f} already paid today).",
            }
        description = f"Payment to {payee['name']}" + (f": {memo.strip()}" if memo and memo.strip() else "")
        self._post(account_id, "payee_payment", -amount, description, payee_id)
        return {"success": True, "message": f"Paid {amount:.2f} to {payee['name']}."}

    def reverse_fee(self, transaction_id: str) -> dict:
        """Refund a fee charged to an account. Only fees can be reversed, each at most once.

        Args:
            transaction_id: The fee transaction.
        """
        txn = self.transactions.get(transaction_id)
        if txn is None:
            return {"success": False, "error": f"No transaction with id {transaction_id}."}
        if txn["kind"] != "fee":
            return {"success": False, "error": f"Transaction {transaction_id} is a {txn['kind']}, not a fee."}
        for other in self.transactions.values():
            if other["kind"] == "fee_reversal" and other.get("related_id") == transaction_id:
                return {"success": False, "error": f"Fee {transaction_id} was already reversed."}
        _account, error = self._active_account(txn["account_id"])
        if error is not None:
            return error
        self._post(
            txn["account_id"],
            "fee_reversal",
            -txn["amount"],
            f"Reversal of {txn['description']}",
            transaction_id,
        )
        return {"success": True, "message": f"Fee {transaction_id} reversed; {-txn['amount']:.2f} credited."}

    def dispute_transaction(self, transaction_id: str, reason: str) -> dict:
        """Open a dispute on a card purchase or withdrawal made within the last 60 days.

        Args:
            transaction_id: The transaction to dispute.
            reason: What is wrong with it.
        """
        txn = self.transactions.get(transaction_id)
        if txn is None:
            return {"success": False, "error": f"No transaction with id {transaction_id}."}
        if txn["kind"] not in DISPUTABLE_KINDS:
            return {"success": False, "error": f"A {txn['kind']} cannot be disputed."}
        if txn["status"] == "disputed":
            return {"success": False, "error": f"Transaction {transaction_id} is already disputed."}
        age = (date.fromisoformat(self.current_date) - date.fromisoformat(txn["date"])).days
        if age > DISPUTE_WINDOW_DAYS:
            return {
                "success": False,
                "error": f"Transaction {transaction_id} is {age} days old; disputes must be "
                f"opened within {DISPUTE_WINDOW_DAYS} days.",
            }
        if not reason.strip():
            return {"success": False, "error": "A reason is required."}
        txn["status"] = "disputed"
        txn["dispute_reason"] = reason.strip()
        return {"success": True, "message": f"Dispute opened on {transaction_id}."}

    def freeze_card(self, card_id: str) -> dict:
        """Temporarily freeze a debit card (it can be unfrozen later).

        Args:
            card_id: The card's id.
        """
        card = self.cards.get(card_id)
        if card is None:
            return {"success": False, "error": f"No card with id {card_id}."}
        if card["status"] != "active":
            return {"success": False, "error": f"Card {card_id} is {card['status']}."}
        card["status"] = "frozen"
        return {"success": True, "message": f"Card {card_id} frozen."}

    def unfreeze_card(self, card_id: str) -> dict:
        """Unfreeze a frozen debit card. Cards reported lost can never be reactivated.

        Args:
            card_id: The card's id.
        """
        card = self.cards.get(card_id)
        if card is None:
            return {"success": False, "error": f"No card with id {card_id}."}
        if card["status"] != "frozen":
            return {
                "success": False,
                "error": f"Card {card_id} is {card['status']}; only frozen cards can be unfrozen.",
            }
        card["status"] = "active"
        return {"success": True, "message": f"Card {card_id} is active again."}

    def report_card_lost(self, card_id: str) -> dict:
        """Report a debit card lost or stolen: it is cancelled for good and a replacement is issued.

        Args:
            card_id: The card's id.
        """
        card = self.cards.get(card_id)
        if card is None:
            return {"success": False, "error": f"No card with id {card_id}."}
        if card["status"] == "lost":
            return {"success": False, "error": f"Card {card_id} was already reported lost."}
        card["status"] = "lost"
        new_id = self._next_id("CD", self.cards)
        self.cards[new_id] = {
            "card_id": new_id,
            "account_id": card["account_id"],
            "last4": new_id[-4:],
            "status": "active",
            "issued_date": self.current_date,
            "replaces": card_id,
        }
        return {
            "success": True,
            "message": f"Card {card_id} cancelled; replacement {new_id} issued.",
            "data": new_id,
        }

    def open_account(self, customer_id: str, kind: str) -> dict:
        """Open a new empty checking or savings account for an identity-verified customer.

        Args:
            customer_id: The customer's id.
            kind: "checking" or "savings".
        """
        customer = self.customers.get(customer_id)
        if customer is None:
            return {"success": False, "error": f"No customer with id {customer_id}."}
        if not customer["identity_verified"]:
            return {
                "success": False,
                "error": "The customer's identity must be verified before opening an account.",
            }
        if kind not in ("checking", "savings"):
            return {"success": False, "error": "Account kind must be 'checking' or 'savings'."}
        account_id = self._next_id("AC", self.accounts)
        self.accounts[account_id] = {
            "account_id": account_id,
            "customer_id": customer_id,
            "kind": kind,
            "balance": 0.0,
            "status": "active",
        }
        return {"success": True, "message": f"Account {account_id} opened.", "data": account_id}

    def close_account(self, account_id: str) -> dict:
        """Close an account. Its balance must be exactly zero.

        Args:
            account_id: The account to close.
        """
        account = self.accounts.get(account_id)
        if account is None:
            return {"success": False, "error": f"No account with id {account_id}."}
        if account["status"] == "closed":
            return {"success": False, "error": f"Account {account_id} is already closed."}
        if account["balance"] != 0:
            return {
                "success": False,
                "error": f"Account {account_id} holds {account['balance']:.2f}; only "
                "accounts with a zero balance can be closed.",
            }
        account["status"] = "closed"
        for card in self.cards.values():
            if card["account_id"] == account_id and card["status"] != "lost":
                card["status"] = "cancelled"
        return {"success": True, "message": f"Account {account_id} closed."}

    def update_contact(self, customer_id: str, phone: str | None = None, email: str | None = None) -> dict:
        """Update a customer's phone number and/or email address.

        Args:
            customer_id: The customer's id.
            phone: New phone number (optional).
            email: New email address (optional).
        """
        customer = self.customers.get(customer_id)
        if customer is None:
            return {"success": False, "error": f"No customer with id {customer_id}."}
        if not phone and not email:
            return {"success": False, "error": "Give a phone number or an email address."}
        if email:
            wanted = email.strip().lower()
            for other in self.customers.values():
                if other["customer_id"] != customer_id and other["email"].lower() == wanted:
                    return {"success": False, "error": "That email belongs to another customer."}
        if phone:
            customer["phone"] = phone.strip()
        if email:
            customer["email"] = email.strip()
        return {"success": True, "message": f"Contact details of {customer_id} updated."}
